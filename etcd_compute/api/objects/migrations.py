"""Nova's migration records (os-migrations) from our instances' events: each resize,
move (`schedule.py migrate`, os-migrateLive, a drain) and evacuation (a dead host's
instance rebuilt elsewhere) an instance's event log holds is one migration.

    our event        migration_type   status while running, then
    resize           resize           pre-migrating (asked through the API, its host
                                      has not taken it up); migrating; finished
                                      (VERIFY_RESIZE), then confirmed
                                      or reverted by a later confirm/revert; error
    migrate          live-migration   running; completed; error
                     migration (cold) migrating; finished (VERIFY_RESIZE: the API's
                                      migrate awaits its confirm), then confirmed or
                                      reverted; confirmed (one not waiting); error
    evacuate         migration        running; completed; error (a drain's move)
    recover          evacuation       accepted; done; failed

The source is where the event ran; the destination the host the instance was on next
(a resize stays). Ids are stable integers and uuids derived from the event (Nova's count
up in its database; we keep no table). Like the events, a deleted instance's go with
its DELETED record, and each instance keeps its last 50 events.
"""

from __future__ import annotations

import hashlib
import uuid as uuidlib
from dataclasses import dataclass
from typing import Any

from etcd_compute import events
from etcd_compute.api.objects.servers import Server, Servers
from etcd_compute.etcd import KeyValueStore
from etcd_compute.instances import states

# Derived uuids: uuid5(this, "<instance>/<action>/<started_at>").
_NAMESPACE = uuidlib.UUID("7d1c5f02-3b7e-4a0c-9a55-52f3c1e8b0d4")
TYPES = {"resize": "resize", "migrate": "live-migration", "evacuate": "migration",
         "recover": "evacuation"}
_STATUS = {  # (running, success, failure) per migration_type
    "resize": ("migrating", "finished", "error"),
    "live-migration": ("running", "completed", "error"),
    "migration": ("running", "completed", "error"),
    "evacuation": ("accepted", "done", "failed")}


@dataclass
class Migration:
    id: int
    uuid: str
    instance_uuid: str
    migration_type: str
    status: str
    source_compute: str | None
    dest_compute: str | None
    created_at: float
    updated_at: float | None
    user_id: str | None
    project_id: str | None


def _ids(instance: str, event: dict[str, Any]) -> tuple[int, str]:
    """(id, uuid) of the event's migration: from its request (so a resize asked is the
    same migration once its host takes it up), else from when it started."""
    key = f"{instance}/{event.get('request_id') or event['started_at']!r}"
    uuid = str(uuidlib.uuid5(_NAMESPACE, key))
    return int(hashlib.sha256(key.encode()).hexdigest()[:7], 16) + 1, uuid


def _owner(event: dict[str, Any], server: Server) -> tuple[str, str]:
    """Who started it: the API's caller (api:USER@PROJECT), else the server's owner."""
    by = event.get("by") or ""
    if by.startswith("api:") and "@" in by:
        user, _, project = by[4:].partition("@")
        if user and project:
            return user, project
    return str(server.doc["user_id"]), server.project_id


def of_server(server: Server, log: events.Events) -> list[Migration]:
    """The migrations in one server's event log."""
    found = []
    ordered = sorted(log, key=lambda e: e["started_at"])
    task = server.doc.get("task") or {}
    if task.get("action") == "resize" and server.record is not None and \
            server.record.get("request_id") != task["request_id"] and \
            all(e.get("request_id") != task["request_id"] for e in log):
        # Asked through the API, not taken up by its host yet: Nova's pre-migrating.
        asked = {"action": "resize", "request_id": task["request_id"],
                 "started_at": task["at"], "result": "asked",
                 "host_name": server.record.get("host_name"), "by": None}
        ordered.append(asked)
    current_host = (server.record or {}).get("host_name")
    for index, event in enumerate(ordered):
        kind = TYPES.get(event["action"])
        if kind is None:
            continue
        cold = kind == "live-migration" and (event.get("live") is False or (
            "downtime" not in (event.get("detail") or "") and
            event["result"] == events.SUCCESS))
        if cold:
            kind = "migration"
        running, success, failure = _STATUS["resize" if cold else kind]
        status = {events.RUNNING: running, events.SUCCESS: success,
                  "asked": "pre-migrating"}.get(event["result"], failure)
        later = ordered[index + 1:]
        source = event.get("host_name")
        if kind == "resize":
            dest = source
            if status == success:
                for after in later:
                    if after["action"] in ("confirm-resize", "revert-resize") and \
                            after["result"] == events.SUCCESS:
                        status = "confirmed" if after["action"] == "confirm-resize" \
                            else "reverted"
                        break
        else:
            dest = next((e.get("host_name") for e in later
                         if e.get("host_name") and e.get("host_name") != source),
                        current_host if current_host != source else None)
            if status != success:
                dest = dest if status == running else None
            elif cold:
                status = _cold_status(server, event, later)
        migration_id, uuid = _ids(server.uuid, event)
        user, project = _owner(event, server)
        found.append(Migration(migration_id, uuid, server.uuid, kind, status, source, dest,
                               float(event["started_at"]), event.get("ended_at"), user,
                               project))
    return found


def _cold_status(server: Server, event: dict[str, Any], later: list[dict[str, Any]]) -> str:
    """A cold move that moved: finished while it awaits its confirm (its source's record
    MIGRATED, its task finished), reverted when its revert is the next event, else
    confirmed (by its confirm, or at once when it did not wait: a drain's, the
    operator's)."""
    record = server.record or {}
    if record.get("state") == states.MIGRATED and \
            record.get("request_id") == event.get("request_id") and \
            (record.get("task") or {}).get("finished"):
        return "finished"
    after = later[0] if later else {}  # the confirm or revert is written with its end
    if after.get("action") == "revert-resize" and after.get("result") == events.SUCCESS:
        return "reverted"
    return "confirmed"


def every(store: KeyValueStore, servers: Servers) -> list[Migration]:
    """Every server's migrations (deleted ones' while their records live), newest first
    (Nova's order: created_at, then id, descending)."""
    found: list[Migration] = []
    for server in servers.list(deleted=True):
        if server.host is None:
            continue
        found += of_server(server, events.read(store, server.host, server.uuid))
    return sorted(found, key=lambda m: (m.created_at, m.id), reverse=True)

"""An instance's record: a first one, the next one, and where to find it.

`new_record`, `moved` (checked against the states' table) and `error_record`
build records; `read_record`, `locate` and `find` read them (an unreadable
record reads as absent, with a fault, at its real revision, so that the next
write replaces it); `group_members` and `count_by_host` are the reads the
scheduler plans with.
"""

from __future__ import annotations

import time
from collections import Counter
from dataclasses import dataclass
from typing import Any

from etcd_compute import messages
from etcd_compute.errors import InvalidMessage
from etcd_compute.etcd import Entry, KeyValueStore
from etcd_compute.instances.ownership import forget
from etcd_compute.instances.states import (
    DELETED,
    ERROR,
    INCOMING,
    TRANSIENT,
    check_transition,
    security_groups,
)
from etcd_compute.keys import RECORDS, SPECS


def new_record(spec: dict[str, Any], state: str, host_name: str | None = None) -> dict[str, Any]:
    """A first record for the instance in `spec`."""
    check_transition(None, state)
    now = time.time()
    return {
        "uuid": spec["uuid"],
        "state": state,
        "name": spec.get("name"),
        "host": spec["host"],
        "host_name": host_name,
        "ip": None,
        "error": None,
        "resources": spec["resources"],
        "image": spec.get("image", {}).get("url"),
        "group": (spec.get("group") or {}).get("name"),
        "security_groups": security_groups(spec),
        "created_at": spec.get("requested_at", now),
        "updated_at": now,
        **{owner: spec[owner] for owner in ("project_id", "user_id") if owner in spec},
    }


def moved(record: dict[str, Any], state: str, **fields: Any) -> dict[str, Any]:
    """`record` in `state`, with `fields` changed and a fresh updated_at (and no task once
    out of an action)."""
    check_transition(record["state"], state)
    changed = {**record, **fields, "state": state, "updated_at": time.time()}
    if state not in TRANSIENT:
        changed.pop("task", None)
    return changed


def error_record(uuid: str, host: str | None, reason: str) -> dict[str, Any]:
    """An ERROR record for an instance whose spec could not even be read."""
    now = time.time()
    return {"uuid": uuid, "state": ERROR, "host": host, "error": reason,
            "created_at": now, "updated_at": now}


@dataclass
class RecordRead:
    """A record as read: None when absent or unreadable (`fault` says why)."""

    record: dict[str, Any] | None
    revision: int
    fault: str | None = None

    @property
    def state(self) -> str | None:
        return self.record["state"] if self.record else None


def read_record(store: KeyValueStore, host: str, uuid: str) -> RecordRead:
    """The record of `uuid` on `host` and its revision; an unreadable one reads as absent
    (with a fault), at its real revision, so the next write replaces it."""
    entry = store.get(store.keys.record(host, uuid))
    if entry is None:
        return RecordRead(None, 0)
    try:
        return RecordRead(messages.decode(messages.INSTANCE_RECORD, entry.value),
                          entry.mod_revision)
    except InvalidMessage as exc:
        return RecordRead(None, entry.mod_revision, str(exc))


def read_spec(store: KeyValueStore, host: str,
              uuid: str) -> tuple[Entry | None, dict[str, Any] | None]:
    """The spec key of `uuid` on `host` and its decoded spec; an unreadable spec decodes as
    None beside its entry (the caller drops it or refuses), an absent one is (None, None)."""
    entry = store.get(store.keys.spec(host, uuid))
    if entry is None:
        return None, None
    try:
        return entry, messages.decode(messages.INSTANCE_SPEC, entry.value)
    except InvalidMessage:
        return entry, None


def spec_at(host: str, uuid: str, raw: bytes) -> dict[str, Any]:
    """The spec written at /hosts/<host>/specs/<uuid>, decoded: InvalidMessage if it does not
    match its schema or names another instance or host than its key (a host acts on such a
    spec by refusing it, and counts nothing for it)."""
    spec = messages.decode(messages.INSTANCE_SPEC, raw)
    if spec["uuid"] != uuid or spec["host"] != host:
        raise InvalidMessage(f"instance_spec: uuid/host {spec['uuid']}/{spec['host']} do not "
                             f"match key {host}/{uuid}")
    return spec


def locate(store: KeyValueStore, uuid: str) -> dict[str, Any] | None:
    """Where `uuid` is ({"host": rp, "group": ...}), or None if it is known nowhere."""
    try:
        location, _ = store.read(messages.INSTANCE_LOCATION, store.keys.location(uuid))
    except InvalidMessage:
        return None
    return location


def find(store: KeyValueStore, uuid: str) -> tuple[str | None, RecordRead]:
    """(host, record) of `uuid`, from its location; without one (a spec written straight to a
    host, then rejected), from a search of the hosts' records (a move's INCOMING arrival
    only when it is all there is). (None, absent) if unknown."""
    location = locate(store, uuid)
    if location is not None:
        return location["host"], read_record(store, location["host"], uuid)
    entries, _ = store.get_prefix(store.keys.hosts(), keys_only=True)
    arrival: tuple[str, RecordRead] | None = None
    for entry in entries:
        parsed = store.keys.parse_host_key(entry.key)
        if parsed is not None and parsed.kind == RECORDS and parsed.uuid == uuid:
            read = read_record(store, parsed.host, uuid)
            if read.state != INCOMING:
                return parsed.host, read
            arrival = arrival or (parsed.host, read)  # a move's arrival: its home first
    return arrival or (None, RecordRead(None, 0))


def group_members(store: KeyValueStore, name: str) -> tuple[dict[str, dict[str, Any]], int]:
    """The live members of server group `name` ({uuid: member}) and the revision they were
    read at. Members that ended (ERROR, DELETED) do not count; those whose record is gone
    are forgotten here (their host could not remove the operator's keys)."""
    entries, revision = store.get_prefix(store.keys.group(name))
    live: dict[str, dict[str, Any]] = {}
    for entry in entries:
        uuid = entry.key.rsplit("/", 1)[-1]
        try:
            member = messages.decode(messages.GROUP_MEMBER, entry.value)
        except InvalidMessage:
            continue
        read = read_record(store, member["host"], uuid)
        if read.record is None and read.fault is None and \
                forget(store, uuid, member["host"], name) is not None:
            continue  # it ended and is forgotten
        if read.state not in (ERROR, DELETED):
            live[uuid] = member
    return live, revision


def count_by_host(store: KeyValueStore) -> Counter[str]:
    """Instances per host, from the spec keys (one keys-only read)."""
    entries, _ = store.get_prefix(store.keys.hosts(), keys_only=True)
    counts: Counter[str] = Counter()
    for entry in entries:
        parsed = store.keys.parse_host_key(entry.key)
        if parsed is not None and parsed.kind == SPECS:
            counts[parsed.host] += 1
    return counts

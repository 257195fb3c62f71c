"""Servers as the compute API sees them: its view of an instance (`/servers/<uuid>`, who
owns it, what it was asked with) joined with the instance's record on its host.

A server is the API's view plus, while it exists, the instance: its location says which
host holds it, its record how it is doing. A view with a `fault` and no instance is a
create that failed before any claim (ERROR, as Nova keeps such a server). A view whose
instance ended (its record DELETED, or gone) is no server any more: it is forgotten here
(with the instance's other operator keys) the first time it is read, as `schedule.py`
forgets ended instances.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

from etcd_compute import hosts as hosts_state
from etcd_compute import messages
from etcd_compute.errors import InvalidMessage
from etcd_compute.etcd import (
    Compare,
    Delete,
    Entry,
    KeyValueStore,
    Range,
    SharedLease,
    Txn,
    put_message,
)
from etcd_compute.instances import external_events, ownership, records, states
from etcd_compute.instances import migrations as instance_migrations
from etcd_compute.keys import UUID

# The server view's tasks of a move (server_actions.py): shown while it is in flight.
MOVE_TASKS = ("live-migrate", "migrate")


class ServerChanged(Exception):
    """The server's view changed while we wrote it (try again)."""


@dataclass
class Server:
    """The API's view (`doc`, read at `revision`) and the instance's record and host."""

    doc: dict[str, Any]
    revision: int
    record: dict[str, Any] | None = None
    host: str | None = None

    @property
    def uuid(self) -> str:
        return str(self.doc["uuid"])

    @property
    def project_id(self) -> str:
        return str(self.doc["project_id"])

    @property
    def state(self) -> str:
        """Our instance state; ERROR for a create that failed before any claim."""
        if self.record is not None:
            return str(self.record["state"])
        return states.ERROR if self.doc.get("fault") else states.SCHEDULED

    @property
    def updated_at(self) -> float:
        return max(float(self.doc["updated_at"]),
                   float((self.record or {}).get("updated_at") or 0))


class Servers:
    """The servers the API made, in etcd."""

    def __init__(self, store: KeyValueStore):
        self.store = store
        self.keys = store.keys
        # What other services said of servers, handed to their hosts with one lease.
        self._events_lease = SharedLease(store, external_events.TTL_SECONDS)

    def get(self, uuid: str, deleted: bool = False) -> Server | None:
        """The server `uuid`, or None: not one the API made, or ended (`deleted`: one whose
        DELETED record still lives is found too)."""
        if not UUID.match(uuid):
            return None
        entry = self.store.get(self.keys.server(uuid))
        if entry is None:
            return None
        found = self._join([entry], deleted=deleted)
        return found[0] if found else None

    def events_host(self, uuid: str) -> tuple[bool, str | None]:
        """(whether we have the instance `uuid`, the host its events go to: None while it
        has none). Any instance, as Nova's API takes events for every instance: the API's
        own servers and those `schedule.py` placed (known by their location)."""
        server = self.get(uuid)
        if server is not None:
            return True, server.host
        if not UUID.match(uuid):
            return False, None
        location = records.locate(self.store, uuid)
        return (True, location["host"]) if location is not None else (False, None)

    def hand_events(self, host: str, uuid: str, events: list[dict[str, Any]]) -> bool:
        """Give the instance's host what another service (Neutron) said of it: appended to
        its key there (`instances/external_events.py`). False: its record is not there."""
        return external_events.hand_to_host(self.store, host, uuid, events,
                                            self._events_lease())

    def list(self, project_id: str | None = None, deleted: bool = False) -> list[Server]:
        """Every live server (of `project_id` if given), oldest first (`deleted`: with
        those whose DELETED record still lives)."""
        entries, _ = self.store.get_prefix(self.keys.servers())
        servers = self._join(entries, project_id, deleted)
        return sorted(servers, key=lambda s: (s.doc["created_at"], s.uuid))

    def _join(self, entries: list[Entry], project_id: str | None = None,
              deleted: bool = False) -> list[Server]:
        """Views with their instances: two etcd round trips however many there are."""
        views: list[Server] = []
        for entry in entries:
            try:
                doc = messages.decode(messages.SERVER, entry.value)
            except InvalidMessage:
                continue  # unreadable: shown to nobody
            if project_id is None or doc["project_id"] == project_id:
                views.append(Server(doc, entry.mod_revision))
        if not views:
            return []
        locations, _ = self.store.read_many(
            [Range(self.keys.location(v.uuid), prefix=False) for v in views])
        for view, found in zip(views, locations, strict=True):
            if found.entries:
                try:
                    view.host = messages.decode(messages.INSTANCE_LOCATION,
                                                found.entries[0].value)["host"]
                except InvalidMessage:
                    view.host = None
        located = [v for v in views if v.host]
        records, _ = self.store.read_many(
            [Range(self.keys.record(str(v.host), v.uuid), prefix=False) for v in located])
        for view, found in zip(located, records, strict=True):
            if found.entries:
                try:
                    view.record = messages.decode(messages.INSTANCE_RECORD,
                                                  found.entries[0].value)
                except InvalidMessage:
                    view.record = None
        for view in located:
            self._drop_move_gone(view)
        live = []
        for view in views:
            if view.record is not None and (deleted or view.record["state"] != states.DELETED):
                live.append(view)
            elif view.record is None and view.host is None and view.doc.get("fault"):
                live.append(view)  # a create that failed before its claim: ERROR
            elif view.record is None and view.host is not None:
                self._forget_if_ended(view)
            elif view.record is None and not view.doc.get("fault"):
                self._drop_orphan(view)
        return live

    def _drop_move_gone(self, view: Server) -> None:
        """A move's task (live-migrate, migrate) whose move is no longer in flight (given up
        before its source took it up, or done) is not shown: only the API's view of the
        move says it was asked."""
        task = view.doc.get("task")
        if not task or task.get("action") not in MOVE_TASKS:
            return
        migration, _ = instance_migrations.read(self.store, view.uuid)
        if migration is None or migration.get("request_id") != task["request_id"]:
            view.doc = {**view.doc, "task": None}

    def _forget_if_ended(self, view: Server) -> None:
        """A located instance without a record: gone (its record expired) unless it is
        being written right now; `ownership.forget` compares for that."""
        ownership.forget(self.store, view.uuid, str(view.host), None)

    def _drop_orphan(self, view: Server) -> None:
        """A view whose instance is known nowhere (its create died between writes, or it
        ended and was forgotten by `schedule.py`): removed if unchanged."""
        if self.store.get(self.keys.location(view.uuid)) is not None:
            return
        self.store.commit(Txn([Compare(self.keys.server(view.uuid), "mod", "==",
                                       view.revision)], [Delete(self.keys.server(view.uuid))]))

    def save(self, server: Server, changes: dict[str, Any]) -> Server:
        """Write `changes` to the view if unchanged since read: ServerChanged otherwise."""
        doc = {**server.doc, **changes, "updated_at": time.time()}
        key = self.keys.server(server.uuid)
        written = self.store.commit(Txn([Compare(key, "mod", "==", server.revision)],
                                        [put_message(messages.SERVER, key, doc)]))
        if written is None:
            raise ServerChanged(server.uuid)
        return Server(doc, written, server.record, server.host)

    def write_failed(self, docs: list[dict[str, Any]]) -> None:
        """Views of a create that failed before any claim (each with its fault)."""
        self.store.commit(Txn([], [put_message(messages.SERVER, self.keys.server(d["uuid"]), d)
                                   for d in docs]))

    def remove_failed(self, server: Server) -> bool:
        """Delete a failed create's view (it has no instance)."""
        key = self.keys.server(server.uuid)
        return self.store.commit(Txn([Compare(key, "mod", "==", server.revision)],
                                     [Delete(key)])) is not None

    def host_status(self, hosts: set[str]) -> dict[str, str]:
        """Nova's host_status of each provider: UP, DOWN (no heartbeat) or MAINTENANCE
        (an operator disabled it)."""
        if not hosts:
            return {}
        up, disabled = hosts_state.alive_and_disabled(self.store)
        return {host: "MAINTENANCE" if host in disabled else "UP" if host in up else "DOWN"
                for host in hosts}

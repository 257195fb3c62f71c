"""What the operator's side writes about another host's instances: moves and dead hosts.

A host may not write another host's keys, so the controller moves an
instance: `move` (a failed build or a drain, RESCHEDULING -> SCHEDULED on
another host), `evacuate` (its host died: built anew elsewhere) and
`finish_destroy_on_dead_host`. Spec, record, events, location and group
member move in one transaction, compared with what was read and, for a dead
host, with its heartbeat still being gone (`host_down`). The caller moves
the claim in Placement first, and puts it back if the transaction fails.
"""

from __future__ import annotations

from typing import Any

from etcd_compute import events
from etcd_compute.etcd import Compare, Delete, KeyValueStore, Txn, absent, unchanged
from etcd_compute.instances import host as host_txn
from etcd_compute.instances.ownership import host_deletes, placed_ops
from etcd_compute.instances.records import RecordRead, moved
from etcd_compute.instances.states import SCHEDULED, wants_stopped
from etcd_compute.keys import Keys


def host_down(keys: Keys, host: str) -> Compare:
    """Guards what the operator's side does to a dead host's instances: the host did not
    come back (its heartbeat key is still gone) when the transaction runs."""
    return absent(keys.alive(host))


def _moved_away(store: KeyValueStore, spec: dict[str, Any], read: RecordRead,
                moved_spec: dict[str, Any], record: dict[str, Any], action: str,
                guard: list[Compare], how: str | None = None) -> Txn:
    """The instance's keys from its host to `moved_spec["host"]`, events carried along
    (`how` it came to move, in its event)."""
    keys, uuid, old = store.keys, spec["uuid"], spec["host"]
    detail = f"placed on {moved_spec['host']}" + (f"; {how}" if how else "")
    log = events.append(
        events.close(events.read(store, old, uuid), f"its host {old} gave it up"),
        events.event(action, old, (read.record or {}).get("host_name"), by=events.CONTROLLER,
                     result=events.SUCCESS, detail=detail))
    return Txn(
        [unchanged(keys.record(old, uuid), read.revision), *guard],
        [*host_deletes(keys, old, uuid), Delete(keys.record(old, uuid)),
         Delete(keys.events(old, uuid)), *placed_ops(keys, moved_spec, record, log)],
    )


def finish_destroy_on_dead_host(store: KeyValueStore, spec: dict[str, Any], read: RecordRead,
                                ttl: int, detail: str | None = None) -> int | None:
    """A destroy nobody will carry out (the host is down) -> DELETED, by the operator's
    side: only if the host is still down and the record is as it was read (the
    controller may have moved the instance meanwhile). The caller frees the claim after
    this succeeds, never before: a moved instance keeps its claim."""
    return host_txn.delete(store, spec, read, ttl,
                           guard=(host_down(store.keys, spec["host"]),
                                  unchanged(store.keys.record(spec["host"], spec["uuid"]),
                                            read.revision)), detail=detail)


def _spec_unchanged(keys: Keys, spec: dict[str, Any], revision: int | None) -> list[Compare]:
    """The spec as it was read (a destroy written meanwhile must not be moved away)."""
    if revision is None:
        return []
    return [Compare(keys.spec(spec["host"], spec["uuid"]), "mod", "==", revision)]


def move(store: KeyValueStore, spec: dict[str, Any], read: RecordRead, host: str,
         allocations: dict[str, Any], alternates: list[dict[str, Any]],
         spec_revision: int | None = None) -> int | None:
    """RESCHEDULING on spec's host -> SCHEDULED on `host` (the operator's side: it writes
    another host's keys). Spec, record, events, location and membership move in one
    transaction, if record and spec (at `spec_revision`) are as they were read; the caller
    moved the claim first (one Placement call)."""
    assert read.record is not None
    moved_spec = {**spec, "action": "build", "host": host, "allocations": allocations,
                  "alternates": alternates}
    moved_spec.pop("request", None)
    record = moved(read.record, SCHEDULED, host=host, host_name=None, error=None)
    return store.commit(_moved_away(store, spec, read, moved_spec, record, "reschedule",
                                    _spec_unchanged(store.keys, spec, spec_revision)))


def evacuate(store: KeyValueStore, spec: dict[str, Any], read: RecordRead, host: str,
             allocations: dict[str, Any], spec_revision: int | None = None,
             how: str | None = None) -> int | None:
    """An instance of a dead host -> SCHEDULED on `host`, to be built anew from its image
    (its disk was local: it is lost), powered off if it was stopped. Spec (a build),
    record, events, location and membership move in one transaction, only if the dead
    host has not come back and neither record nor spec (at `spec_revision`) changed since
    they were read. The caller moved the claim first; `how` the dead host was dealt with
    (fenced, or waited out) goes in the event."""
    return store.commit(evacuate_txn(store, spec, read, host, allocations, spec_revision,
                                     how))


def evacuate_txn(store: KeyValueStore, spec: dict[str, Any], read: RecordRead, host: str,
                 allocations: dict[str, Any], spec_revision: int | None = None,
                 how: str | None = None) -> Txn:
    """`evacuate`'s transaction (several instances of a dead host go in one)."""
    assert read.record is not None
    rebuilt = {**spec, "action": "build", "host": host, "allocations": allocations,
               "alternates": [], "stopped": wants_stopped(read.record, spec)}
    rebuilt.pop("request", None)
    record = moved(read.record, SCHEDULED, host=host, host_name=None, ip=None, error=None)
    return _moved_away(store, spec, read, rebuilt, record, "recover",
                       [host_down(store.keys, spec["host"]),
                        *_spec_unchanged(store.keys, spec, spec_revision)], how)

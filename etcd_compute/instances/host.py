"""What a host writes about its instances: one transaction per transition.

The compute daemon (`compute/machine.py`) moves an instance through these:
BUILDING (`begin_build`), ACTIVE or SHUTOFF (`activate`), ERROR (`fail`,
`reject`), RESCHEDULING (`hand_over`), DELETING and DELETED (`mark_deleting`,
`delete`), and ACTIVE <-> SHUTOFF when the hypervisor saw the guest change
(`power_changed`). Every write compares the revision it read, so an event
delivered twice never moves an instance twice; each also appends to the
instance's events (`events.py`) in the same transaction. The controller ends
instances in ERROR through `fail` too (guarded by the host being down).
"""

from __future__ import annotations

import time
from typing import Any

from etcd_compute import events
from etcd_compute.etcd import Compare, Delete, KeyValueStore, Put, Txn, unchanged
from etcd_compute.instances.ownership import host_deletes, record_put, spec_put
from etcd_compute.instances.records import RecordRead, error_record, moved, new_record
from etcd_compute.instances.states import (
    ACTIVE,
    BUILDING,
    DELETED,
    DELETING,
    DESTROY,
    ERROR,
    RESCHEDULING,
    SHUTOFF,
    wants_stopped,
)


def _who(spec: dict[str, Any]) -> str | None:
    return (spec.get("request") or {}).get("by")


def _request_id(spec: dict[str, Any]) -> str | None:
    return (spec.get("request") or {}).get("id")


def begin_build(store: KeyValueStore, spec: dict[str, Any], spec_revision: int,
                read: RecordRead, host_name: str) -> int | None:
    """-> BUILDING on `spec["host"]`, if neither record nor spec moved since they were read."""
    keys, uuid, host = store.keys, spec["uuid"], spec["host"]
    building = (moved(read.record, BUILDING, host=host, host_name=host_name)
                if read.record else new_record(spec, BUILDING, host_name))
    success = [record_put(keys, building)]
    if read.state != BUILDING:  # a new attempt, not one resumed after a restart
        log = events.read(store, host, uuid)
        first = not log
        success.append(events.put(keys, host, uuid, events.append(log, events.event(
            "create" if first else "build", host, host_name, by=spec.get("requested_by"),
            request_id=spec.get("request_id") if first else None,
            started_at=spec.get("requested_at") if first else None))))
    return store.commit(Txn(
        [unchanged(keys.record(host, uuid), read.revision),
         Compare(keys.spec(host, uuid), "mod", "==", spec_revision)],
        success,
    ))


def activate(store: KeyValueStore, read: RecordRead, ip: str | None,
             stopped: bool = False) -> int | None:
    """BUILDING -> ACTIVE with its IP (also on /booted/, as in the original toy); SHUTOFF
    when the spec asked for it powered off."""
    assert read.record is not None
    keys, record = store.keys, read.record
    host, uuid = record["host"], record["uuid"]
    log = events.end(events.read(store, host, uuid), ("create", "build"), events.SUCCESS,
                     detail=f"ip {ip}" if ip else None,
                     otherwise=events.event("build", host, record.get("host_name")))
    success = [record_put(keys, moved(record, SHUTOFF if stopped else ACTIVE, ip=ip,
                                       error=None, launched_at=time.time())),
               events.put(keys, host, uuid, log)]
    if ip:
        # /booted/ holds the bare IP, the original toy's format, not a JSON message.
        success.append(Put(keys.booted(host, uuid), ip))
    return store.commit(Txn([unchanged(keys.record(host, uuid), read.revision)], success))


def fail(store: KeyValueStore, spec: dict[str, Any], read: RecordRead, reason: str,
         guard: tuple[Compare, ...] = (), action: str = "build",
         by: str | None = None) -> int | None:
    """-> ERROR with `reason`; the host's other keys go. The caller freed the claim. The
    running event ends in error (or one for `action`, by `by`, is added)."""
    keys, uuid, host = store.keys, spec["uuid"], spec["host"]
    failed = (moved(read.record, ERROR, error=reason) if read.record
              else error_record(uuid, host, reason))
    log = events.end(events.read(store, host, uuid), ("create", "build", action), events.ERROR,
                     reason, otherwise=events.event(action, host, failed.get("host_name"),
                                                    by=by))
    return store.commit(Txn([unchanged(keys.record(host, uuid), read.revision), *guard],
                            [record_put(keys, failed), events.put(keys, host, uuid, log),
                             *host_deletes(keys, host, uuid)]))


def reject(store: KeyValueStore, rp_uuid: str, uuid: str, spec_revision: int,
           reason: str) -> int | None:
    """A spec nobody can act on: ERROR record with the reason, spec key dropped."""
    keys = store.keys
    spec_key = keys.spec(rp_uuid, uuid)
    log = events.append(events.read(store, rp_uuid, uuid),
                        events.event("reject", rp_uuid, result=events.ERROR, error=reason))
    return store.commit(Txn([Compare(spec_key, "mod", "==", spec_revision)],
                            [record_put(keys, error_record(uuid, rp_uuid, reason)),
                             events.put(keys, rp_uuid, uuid, log), Delete(spec_key)]))


def hand_over(store: KeyValueStore, spec: dict[str, Any], read: RecordRead, reason: str,
              evacuating: bool = False) -> int | None:
    """-> RESCHEDULING: this host gives the instance up (its build failed, or a drain
    evacuated it) and the controller is asked to move it (a host may not write another
    host's keys). The claim stays as it is; the spec says whether to build it powered off
    (it was stopped), compared at the revision it has now."""
    assert read.record is not None
    keys, record = store.keys, read.record
    host, uuid = spec["host"], spec["uuid"]
    log = events.read(store, host, uuid)
    if evacuating:
        log = events.append(log, events.event(
            "evacuate", host, record.get("host_name"), by=_who(spec),
            request_id=_request_id(spec), result=events.SUCCESS, detail=reason))
    else:
        log = events.end(log, ("create", "build"), events.ERROR, reason,
                         otherwise=events.event("build", host, record.get("host_name")))
    compare = [unchanged(keys.record(host, uuid), read.revision)]
    success = [record_put(keys, moved(record, RESCHEDULING, error=reason)),
               events.put(keys, host, uuid, log)]
    stopped = wants_stopped(record, spec)
    if stopped != bool(spec.get("stopped")):
        entry = store.get(keys.spec(host, uuid))
        compare.append(unchanged(keys.spec(host, uuid), entry.mod_revision if entry else 0))
        success.append(spec_put(keys, {**spec, "stopped": stopped}))
    return store.commit(Txn(compare, success))


def mark_deleting(store: KeyValueStore, spec: dict[str, Any], read: RecordRead) -> int | None:
    """-> DELETING (a destroy was asked for; an action running is cut short)."""
    keys, host, uuid = store.keys, spec["host"], spec["uuid"]
    deleting = (moved(read.record, DELETING) if read.record
                else new_record(spec, DELETING))
    asked = spec.get("action") == DESTROY
    log = events.append(
        events.close(events.read(store, host, uuid), "cancelled: destroy asked"),
        events.event(DESTROY, host, deleting.get("host_name"), by=_who(spec) if asked else None,
                     request_id=_request_id(spec) if asked else None))
    return store.commit(Txn([unchanged(keys.record(host, uuid), read.revision)],
                            [record_put(keys, deleting), events.put(keys, host, uuid, log)]))


def delete(store: KeyValueStore, spec: dict[str, Any], read: RecordRead, ttl: int,
           guard: tuple[Compare, ...] = (), detail: str | None = None) -> int | None:
    """-> DELETED, a record (and events) that expire after `ttl` s; the host's other keys
    go."""
    keys, host, uuid = store.keys, spec["host"], spec["uuid"]
    deleted = (moved(read.record, DELETED, ip=None) if read.record
               else new_record(spec, DELETED))
    log = events.end(events.read(store, host, uuid), DESTROY, events.SUCCESS, detail=detail,
                     otherwise=events.event(DESTROY, host, deleted.get("host_name"),
                                            by=_who(spec), request_id=_request_id(spec)))
    lease = store.grant(ttl)
    return store.commit(Txn(list(guard), [record_put(keys, deleted, lease),
                                          events.put(keys, host, uuid, log, lease),
                                          *host_deletes(keys, host, uuid)]))


def power_changed(store: KeyValueStore, read: RecordRead, running: bool, why: str,
                  crashed: bool = False) -> int | None:
    """ACTIVE <-> SHUTOFF (PAUSED -> SHUTOFF) without an action: the hypervisor saw the
    guest stop (on its own, crashed, or stopped behind our back) or start."""
    assert read.record is not None
    keys, record = store.keys, read.record
    host, uuid = record["host"], record["uuid"]
    log = events.append(events.read(store, host, uuid), events.event(
        "power-on" if running else "power-off", host, record.get("host_name"),
        by=events.HYPERVISOR, result=events.ERROR if crashed else events.SUCCESS,
        error=why if crashed else None, detail=None if crashed else why))
    return store.commit(Txn([unchanged(keys.record(host, uuid), read.revision)],
                            [record_put(keys, moved(record, ACTIVE if running else SHUTOFF)),
                             events.put(keys, host, uuid, log)]))

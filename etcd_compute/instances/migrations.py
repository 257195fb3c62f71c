"""A move to another host (a migration), one transaction per step, by whoever takes it.

    operator  ask          /migrations/<uuid> (preparing); the source's spec asks
                           `migrate`; the destination gets an `incoming` spec and an
                           INCOMING record for the instance
    dest      answer       its INCOMING record carries the driver's target (or the error)
    controller relay       the target into the source's request (-> migrating)
    source    (begin_action: ACTIVE/SHUTOFF -> MIGRATING), then `migrated` (MIGRATED: the
                           guest left; a cold move's record carries what it sent) or
                           `actions.end_action` with the error (as it was)
    controller finish      a cold move: what the source sent, into the destination's request
    dest      answer       finished=True (the guest defined there, started if it ran)
    controller hand_over   everything of the instance from the source to the destination in
                           one transaction (ACTIVE or SHUTOFF there); the migration goes
    controller await_confirm  instead, a cold move asked with `verify` (the API's migrate):
                           the migration `finished`, the source's task too (VERIFY_RESIZE);
                           then the operator's confirm is the hand_over (a confirm-resize
                           event), its revert a give_up of the defined guest (revert-resize)
    controller call_off    a request's cancel (the operator, or the other end failed);
               give_up     the migration goes and the destination is asked to discard
    operator  give_up      a revert of a move awaiting its confirm whose guest ran: the
                           migration stays, `reverting`, until the destination's copy is gone
    dest      discarded    its spec and record for the instance go (nothing ran there)
    controller reverted    the destination discarded (or is dead, fenced): the migration
                           goes, and the source's copy is asked to start in the same
                           transaction (never before: two copies never run)

Each compares what it read (the spec's and record's revisions, the migration's), so a
step is taken once. The claims move in Placement around these (`claims.hold_source`,
`release_hold`, `revert_holding`): the caller's part. Nothing here talks to a driver.
"""

from __future__ import annotations

import time
from typing import Any

from etcd_compute import events, messages
from etcd_compute.errors import InvalidMessage
from etcd_compute.etcd import (
    Compare,
    Delete,
    Entry,
    KeyValueStore,
    Put,
    Txn,
    absent,
    put_message,
    unchanged,
)
from etcd_compute.instances.actions import request_action, request_id
from etcd_compute.instances.ownership import host_deletes, placed_ops, record_put, spec_put
from etcd_compute.instances.records import RecordRead, moved
from etcd_compute.instances.states import (
    ACTIVE,
    DESTROY,
    INCOMING,
    INCOMING_ACTION,
    MIGRATE,
    MIGRATED,
    SHUTOFF,
    START,
    check_action,
    check_transition,
)
from etcd_compute.keys import Keys

PREPARING, MIGRATING, FINISHING, FAILING = "preparing", "migrating", "finishing", "failing"
# A cold move asked with `verify`, its guest defined at the destination: it waits there for a
# confirm or a revert (Nova's VERIFY_RESIZE, its migration `finished`).
FINISHED = "finished"
# Such a move reverted whose guest ran before it: the source's copy waits, stopped, until the
# destination discarded its own (or is dead), then the controller starts it (`reverted`).
REVERTING = "reverting"


def read(store: KeyValueStore, uuid: str) -> tuple[dict[str, Any] | None, Entry | None]:
    """The instance's migration in flight and its entry (None, None: none, or unreadable)."""
    entry = store.get(store.keys.migration(uuid))
    if entry is None:
        return None, None
    try:
        return messages.decode(messages.MIGRATION, entry.value), entry
    except InvalidMessage:
        return None, entry


def _same(entry: Entry) -> Compare:
    return Compare(entry.key, "mod", "==", entry.mod_revision)


def ask(store: KeyValueStore, spec: dict[str, Any], spec_entry: Entry, source: RecordRead,
        migration: dict[str, Any], request: dict[str, Any], destination_name: str | None
        ) -> int | None:
    """The operator's move: the migration (preparing), the source's spec asking `migrate`,
    the destination's `incoming` spec and INCOMING record, in one transaction, if the
    source's spec and record are as read and nothing of it is at the destination yet.
    ActionRefused (nothing written) when the record's state does not allow a move."""
    assert source.record is not None
    check_action(source.state, MIGRATE, spec["uuid"])
    keys, uuid, there = store.keys, spec["uuid"], migration["destination"]
    incoming_request = {"id": request["id"], "by": request.get("by"), "at": request["at"],
                        "action": INCOMING_ACTION, "migration": migration["id"],
                        "source": spec["host"], "live": migration["live"],
                        "from": source.state}
    arriving = {**spec, "action": INCOMING_ACTION, "host": there,
                "allocations": migration["destination_allocations"],
                "request": incoming_request}
    arriving.pop("alternates", None)
    # A record of its own there (the instance's as it is, arriving): no record -> INCOMING.
    check_transition(None, INCOMING)
    record = {**source.record, "state": INCOMING, "host": there, "host_name": destination_name,
              "ip": None, "error": None, "task": incoming_request, "request_id": None,
              "updated_at": time.time()}
    return store.commit(Txn(
        [_same(spec_entry), unchanged(keys.record(spec["host"], uuid), source.revision),
         absent(keys.spec(there, uuid)), absent(keys.record(there, uuid)),
         absent(keys.migration(uuid))],
        [put_message(messages.MIGRATION, keys.migration(uuid), migration),
         spec_put(keys, {**spec, "action": MIGRATE, "request": request}),
         spec_put(keys, arriving), record_put(keys, record)]))


def answer(store: KeyValueStore, read_there: RecordRead, target: dict[str, Any] | None = None,
           error: str | None = None, finished: bool = False, ip: str | None = None
           ) -> int | None:
    """The destination's answer in its INCOMING record: the driver's target (made ready),
    or the error (it could not), or finished (a cold move's guest defined here)."""
    assert read_there.record is not None
    task = dict(read_there.record.get("task") or {})
    if target is not None:
        task["target"] = target
    if finished:
        task["finished"] = True
    record = {**read_there.record, "task": task, "updated_at": time.time(),
              "error": error if error is not None else read_there.record.get("error")}
    if ip:
        record["ip"] = ip
    keys = store.keys
    return store.commit(Txn(
        [unchanged(keys.record(record["host"], record["uuid"]), read_there.revision)],
        [record_put(keys, record)]))


def _rewrite(store: KeyValueStore, entry: Entry, spec: dict[str, Any],
             request: dict[str, Any], more: tuple[Compare, ...] = (),
             also: tuple[Any, ...] = ()) -> int | None:
    return store.commit(Txn([_same(entry), *more],
                            [spec_put(store.keys, {**spec, "request": request}), *also]))


def _put_migration(keys: Keys, migration: dict[str, Any], **changes: Any) -> Any:
    return put_message(messages.MIGRATION, keys.migration(migration["instance"]),
                       {**migration, **changes, "updated_at": time.time()})


def relay(store: KeyValueStore, spec_entry: Entry, spec: dict[str, Any],
          migration_entry: Entry, migration: dict[str, Any], target: dict[str, Any]
          ) -> int | None:
    """The destination is ready: its target into the source's request; migrating."""
    return _rewrite(store, spec_entry, spec, {**spec["request"], "target": target},
                    (_same(migration_entry),),
                    (_put_migration(store.keys, migration, state=MIGRATING),))


def finish(store: KeyValueStore, spec_entry: Entry, spec: dict[str, Any],
           migration_entry: Entry, migration: dict[str, Any], moved_data: dict[str, Any]
           ) -> int | None:
    """A cold move's guest was sent: what arrived is for the destination to check and
    define; finishing."""
    return _rewrite(store, spec_entry, spec, {**spec["request"], "moved": moved_data},
                    (_same(migration_entry),),
                    (_put_migration(store.keys, migration, state=FINISHING),))


def call_off(store: KeyValueStore, spec_entry: Entry, spec: dict[str, Any], why: str,
             migration_entry: Entry | None = None, migration: dict[str, Any] | None = None
             ) -> int | None:
    """A move's request (either end's) gets a cancel with why; the migration, if given, is
    failing from now on."""
    more: tuple[Compare, ...] = ()
    also: tuple[Any, ...] = ()
    if migration_entry is not None and migration is not None:
        more = (_same(migration_entry),)
        also = (_put_migration(store.keys, migration, state=FAILING, error=why[:4096]),)
    return _rewrite(store, spec_entry, spec, {**spec["request"], "cancel": why[:1024]},
                    more, also)


def migrated(store: KeyValueStore, read_here: RecordRead, figures: dict[str, Any],
             moved_data: dict[str, Any] | None = None) -> int | None:
    """The source's end of a move: the guest left (live), or was sent stopped (cold):
    MIGRATING -> MIGRATED, its event ended with the figures."""
    assert read_here.record is not None
    record, keys = read_here.record, store.keys
    host, uuid = record["host"], record["uuid"]
    task = {**record["task"], "figures": figures}
    if moved_data is not None:
        task["moved"] = moved_data
    log = events.end(events.read(store, host, uuid), MIGRATE, events.SUCCESS,
                     detail=_figures_text(figures),
                     otherwise=events.event(MIGRATE, host, record.get("host_name")))
    return store.commit(Txn(
        [unchanged(keys.record(host, uuid), read_here.revision)],
        # MIGRATED keeps the move's task (where it came from, what it sent): the hand-over
        # reads it.
        [record_put(keys, {**moved(record, MIGRATED), "task": task}),
         events.put(keys, host, uuid, log)]))


def _figures_text(figures: dict[str, Any]) -> str:
    parts = []
    if figures.get("seconds") is not None:
        parts.append(f"{figures['seconds']:.1f} s")
    if figures.get("downtime_ms") is not None:
        parts.append(f"downtime {figures['downtime_ms']} ms")
    for key, what in (("data_total", "of memory"), ("disk_total", "of disk")):
        amount = figures.get(key)
        if amount:
            mib = amount / 2**20
            parts.append(f"{mib:.0f} MiB {what}" if mib >= 10 else f"{mib:.1f} MiB {what}")
    return ", ".join(parts) or "moved"


def hand_over(store: KeyValueStore, migration_entry: Entry, migration: dict[str, Any],
              spec_entry: Entry, spec: dict[str, Any], source: RecordRead,
              destination: RecordRead, confirmed_by: str | None = None) -> int | None:
    """The guest runs (or, cold, is defined) at the destination: everything of the instance
    moves there in one transaction: spec (a build already done, or a destroy asked during
    the move), record (ACTIVE, or SHUTOFF
    as it was), events (the move's included), location, group member, /booted/; the
    source's keys and the migration go. Only if source, destination and migration are as
    read. `confirmed_by`: a move that awaited its confirm, confirmed by whom (its
    confirm-resize event)."""
    assert source.record is not None and destination.record is not None
    keys, uuid, here = store.keys, spec["uuid"], spec["host"]
    there = migration["destination"]
    arrived = destination.record
    was = (source.record.get("task") or {}).get("from", ACTIVE)
    running = (ACTIVE if was == ACTIVE else SHUTOFF)
    moved_spec = {**spec, "action": "build", "host": there,
                  "allocations": migration["destination_allocations"],
                  "stopped": running == SHUTOFF}
    moved_spec.pop("request", None)
    if spec.get("action") == DESTROY:
        # Destroyed during the move, which ended with the guest there: the destroy goes
        # with it, for the destination to carry out (the claim is its own now).
        moved_spec.update(action=DESTROY, request=spec["request"])
    moved_spec.pop("alternates", None)
    ip = arrived.get("ip") or source.record.get("ip")
    # The arrival's record takes the instance's fields as the source kept them (a resize
    # or rebuild finished there meanwhile is not possible: its request was the move).
    check_transition(arrived["state"], running)
    record = {**source.record, "state": running, "host": there,
              "host_name": arrived.get("host_name"), "ip": ip, "task": None, "error": None,
              "updated_at": time.time()}
    log = events.read(store, here, uuid)
    if confirmed_by is not None:
        log = events.append(log, events.event(
            "confirm-resize", there, arrived.get("host_name"), by=confirmed_by,
            result=events.SUCCESS, request_id=request_id()))
    ops: list[Any] = [*host_deletes(keys, here, uuid), Delete(keys.record(here, uuid)),
                      Delete(keys.events(here, uuid)), Delete(keys.migration(uuid)),
                      *placed_ops(keys, moved_spec, record, log)]
    if ip:
        ops.append(Put(keys.booted(there, uuid), ip))
    return store.commit(Txn(
        [_same(migration_entry), _same(spec_entry),
         unchanged(keys.record(here, uuid), source.revision),
         unchanged(keys.record(there, uuid), destination.revision)], ops))


def await_confirm(store: KeyValueStore, migration_entry: Entry, migration: dict[str, Any],
                  source: RecordRead) -> int | None:
    """A cold move asked with `verify` whose guest the destination defined: the migration
    `finished` and the source's MIGRATED task `finished` (the API's VERIFY_RESIZE), until
    the operator confirms (`hand_over`) or reverts (`give_up`); if both are as read."""
    assert source.record is not None
    task = {**(source.record.get("task") or {}), "finished": True}
    if migration.get("destination_name"):
        task["destination_name"] = migration["destination_name"]
    record = {**source.record, "task": task, "updated_at": time.time()}
    return store.commit(Txn(
        [_same(migration_entry),
         unchanged(store.keys.record(record["host"], record["uuid"]), source.revision)],
        [_put_migration(store.keys, migration, state=FINISHED), record_put(store.keys, record)]))


def give_up(store: KeyValueStore, migration_entry: Entry,
            there: tuple[Entry, dict[str, Any]] | None, why: str,
            stranded: RecordRead | None = None, reverted_by: str | None = None,
            reverting: dict[str, Any] | None = None,
            also: tuple[list[Compare], list[Any]] = ([], [])) -> int | None:
    """The move failed or was called off and the source runs the guest as before: the
    migration goes, and the destination (if it still has the instance's spec) is asked to
    discard what it made ready. `stranded`: the source's MIGRATED record of a cold move the
    destination could not finish: back to SHUTOFF with why (its guest is stopped there).
    `reverted_by`: a move that awaited its confirm, reverted by whom: its stranded record
    back to SHUTOFF without an error, a revert-resize event (the guest there defined, the
    destination's discard destroys it). `reverting`: such a revert's request when the guest
    ran before the move: the migration is kept, `reverting` with it, until the destination
    discarded (`reverted` starts the source's copy then); the record's updated_at is the
    request's time. `also`: the caller's compares and writes (the compute API's view)."""
    compares = [_same(migration_entry), *also[0]]
    ops: list[Any] = [Delete(migration_entry.key) if reverting is None else
                      _put_migration(store.keys, _migration(migration_entry),
                                     state=REVERTING, revert=reverting), *also[1]]
    if stranded is not None and stranded.record is not None:
        record = stranded.record
        host, uuid = record["host"], record["uuid"]
        compares.append(unchanged(store.keys.record(host, uuid), stranded.revision))
        back = moved(record, SHUTOFF, error=None if reverted_by is not None else why[:4096],
                     task=None)
        if reverting is not None:
            back["updated_at"] = reverting["at"]
        ops.append(record_put(store.keys, back))
        if reverted_by is not None:
            log = events.append(events.read(store, host, uuid), events.event(
                "revert-resize", host, record.get("host_name"), by=reverted_by,
                result=events.SUCCESS,
                request_id=(reverting or {}).get("id") or request_id()))
            ops.append(events.put(store.keys, host, uuid, log))
    if there is not None:
        entry, spec = there
        compares.append(_same(entry))
        ops.append(spec_put(store.keys, {**spec, "request": {**spec["request"],
                                                             "cancel": why[:1024]}}))
    return store.commit(Txn(compares, ops))


def _migration(entry: Entry) -> dict[str, Any]:
    return messages.decode(messages.MIGRATION, entry.value)


def reverted(store: KeyValueStore, migration_entry: Entry, migration: dict[str, Any],
             start: tuple[Entry, dict[str, Any], RecordRead] | None) -> int | None:
    """A `reverting` move whose destination's copy is gone (discarded, or its host dead and
    fenced): the migration goes and, with `start` (the source's spec entry, spec and
    SHUTOFF record as read), the source is asked to start its copy in the same transaction,
    with the revert's request (its id is the one the compute API's view awaits; asked now,
    after the revert-resize event). Only if all are as read; ActionRefused (nothing
    written) when the record does not allow a start."""
    assert migration["state"] == REVERTING
    drop = ([_same(migration_entry)], [Delete(migration_entry.key)])
    if start is None:
        return store.commit(Txn(*drop))
    entry, spec, read = start
    return request_action(store, entry, spec, read, START,
                          {**migration["revert"], "at": time.time()}, drop)


def discarded(store: KeyValueStore, spec_entry: Entry, read_there: RecordRead
              ) -> int | None:
    """The destination threw away what it made ready: its spec and record for the instance
    go (its other keys too), if both are as read."""
    keys = store.keys
    spec = messages.decode(messages.INSTANCE_SPEC, spec_entry.value)
    host, uuid = spec["host"], spec["uuid"]
    return store.commit(Txn(
        [_same(spec_entry), unchanged(keys.record(host, uuid), read_there.revision)],
        [*host_deletes(keys, host, uuid), Delete(keys.record(host, uuid)),
         Delete(keys.events(host, uuid))]))

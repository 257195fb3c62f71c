"""The operator's moves: an instance to another host, live or cold (docs/explanation/moves.md).

    schedule.py migrate UUID [--live] [--host HOST] [--wait]
    schedule.py migrate-abort UUID

    schedule.py migrate UUID --verify [--host HOST] [--wait]  (cold; then one of:)
    schedule.py migrate-confirm UUID
    schedule.py migrate-revert UUID

`migrate` (also what the API's os-migrateLive and migrate call): the instance must be
ACTIVE (live) or ACTIVE or SHUTOFF (cold), its host up, nothing else asked of it, no move
in flight, and a controller running (it carries the move between the hosts). The
destination is where the scheduler would put the instance now (its own query, filters and
weighers, its server group; its host left out), or the host named, checked the same way.
Then, as Nova does, one Placement request: the instance's consumer holds the destination
and a migration consumer the source; and one etcd transaction: the migration, the
source's request, the destination's arrival (`instances/migrations.ask`). If that
transaction loses a race (or fails), the claims go back. `wait` follows it to its end; `abort` calls
it off (the guest stays on the source).

A cold move asked with `verify` (the compute API's migrate, as Nova's) does not end when
the destination defined the guest: it waits there, `finished` (Nova's VERIFY_RESIZE), the
source keeping its stopped copy and the migration consumer its claim, until `confirm` (the
hand-over: the source's copy and claim go) or `revert` (the claim back on the source, the
guest defined at the destination destroyed there; the source's started again if it ran, by
the controller and only once the destination's copy is gone: the revert awaits nothing).
"""

from __future__ import annotations

import time
import uuid as uuidlib
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from typing import Any, Protocol

from etcd_compute import claims, events
from etcd_compute.errors import (
    ConflictError,
    NotFound,
    NoValidHost,
    PlacementError,
    PlacementUnavailable,
    UsageError,
)
from etcd_compute.etcd import Compare, KeyValueStore, Op
from etcd_compute.hosts import is_alive, under_maintenance
from etcd_compute.instances import actions as action_txn
from etcd_compute.instances import migrations, records, states
from etcd_compute.ops.operations import WaitTimeout, check_uuid, where
from etcd_compute.placement import PlacementClient
from etcd_compute.scheduler.planner import Pick
from etcd_compute.scheduler.spec import operator_name

ATTEMPTS = 3
# The compute API's writes that go in a request's transaction: (compares, operations) for
# the request it is given (its id).
Also = Callable[[dict[str, Any]], tuple[list[Compare], list[Op]]]
# What a wait shows between the hand-over and the source's claim freed.
FREEING_THE_SOURCE = "freeing the source's claim"


class Place(Protocol):
    """`Scheduler.place`: where the instance (its spec) would go, `exclude`d hosts aside,
    or whether the `destination` host would take it."""

    def __call__(self, spec: dict[str, Any], exclude: frozenset[str],
                 destination: str | None = None) -> Pick: ...


@dataclass
class Asked:
    uuid: str
    source: str
    destination: str
    destination_name: str
    live: bool
    request: dict[str, Any]
    migration: str


def _spec(store: KeyValueStore, host: str, uuid: str) -> tuple[Any, dict[str, Any]]:
    entry, spec = records.read_spec(store, host, uuid)
    if entry is None or spec is None:
        raise states.ActionRefused(f"instance {uuid}: its host holds no readable spec for "
                                   "it; destroy it")
    return entry, spec


def resolve_host(placement: PlacementClient, host: str) -> tuple[str, str]:
    """(uuid, name) of the provider named or numbered `host`; NotFound otherwise."""
    if check_uuid_or_none(host):
        found = placement.get_provider(host)
        if found is not None:
            return found["uuid"], found["name"]
    named = placement.list_providers(name=host)
    if named:
        return named[0]["uuid"], named[0]["name"]
    raise NotFound(f"no host {host!r} (neither a provider uuid nor a provider name)")


def check_uuid_or_none(text: str) -> bool:
    try:
        check_uuid(text)
    except UsageError:
        return False
    return True


def migrate(store: KeyValueStore, placement: PlacementClient, place: Place, uuid: str,
            live: bool, host: str | None = None, by: str | None = None,
            verify: bool = False) -> Asked:
    """Ask for the move (`by`: who asks, this operator unless given); ActionRefused
    (nothing written, nothing claimed) when the instance cannot move now, NoValidHost when
    no host (or not the one named) would take it, NotFound for a host that is none.
    `verify` (cold only): wait for `confirm` or `revert` once the destination defined it."""
    check_uuid(uuid)
    if verify and live:
        raise UsageError("a live move cannot wait for a confirm (verify is for cold moves)")
    if store.get(store.keys.leader()) is None:
        raise UsageError("a move needs the controller (schedule.py serve): it carries the "
                         "move between the hosts; start one first")
    wanted = resolve_host(placement, host) if host else None
    for _ in range(ATTEMPTS):
        source, _group, read = where(store, uuid)
        if read.record is None:
            raise NotFound(f"no instance {uuid}")
        states.check_action(read.state, states.MIGRATE, uuid)
        if read.record.get("resize_hold"):  # its old size held on this host (the API's)
            raise states.ActionRefused(f"instance {uuid} awaits the confirm or revert of its "
                                       "resize: migrate is not allowed now")
        if live and read.state != states.ACTIVE:
            raise states.ActionRefused(f"instance {uuid} is {read.state}: a live move needs "
                                       "it ACTIVE (move it cold)")
        entry, spec = _spec(store, source, uuid)
        pending = spec.get("request")
        if spec["action"] in ("destroy", "evacuate") or (
                pending and read.record.get("request_id") != pending["id"]):
            raise states.ActionRefused(f"instance {uuid}: a {spec['action']} is pending; try "
                                       "again when its host has done it")
        if migrations.read(store, uuid)[1] is not None:
            raise states.ActionRefused(f"instance {uuid} is moving already "
                                       "(schedule.py migrate-abort to call it off)")
        if not is_alive(store, source):
            raise states.ActionRefused(f"instance {uuid}: its host is down")
        if "project_id" not in spec:
            raise states.ActionRefused(f"instance {uuid} was not placed by a scheduler: it "
                                       "has no query or project to move it by")
        pick = _destination(store, place, spec, source, wanted)
        migration_id = str(uuidlib.uuid4())
        request = action_txn.new_request(by or operator_name(), live=live,
                                         destination=pick.host.uuid, migration=migration_id,
                                         **({"verify": True} if verify else {}))
        try:
            held, _ = claims.hold_source(placement, uuid, migration_id, pick.allocations,
                                         source)
        except ConflictError as exc:
            if exc.code == claims.ELSEWHERE:
                raise states.ActionRefused(f"instance {uuid}: {exc}; destroy it") from None
            continue  # the destination filled up, or the claim changed: again
        now = time.time()
        migration = {"id": migration_id, "instance": uuid, "source": source,
                     "destination": pick.host.uuid, "destination_name": pick.host.name,
                     "live": live, "state": migrations.PREPARING, "request_id": request["id"],
                     "by": request.get("by"), "requested_at": now, "updated_at": now,
                     "project_id": spec["project_id"], "user_id": spec["user_id"],
                     "source_allocations": held, "destination_allocations": pick.allocations,
                     **({"verify": True} if verify else {})}
        # The ask lost a race (or raised): the source back on the instance, the hold gone;
        # a claim changed since is left to whoever changed it.
        if claims.written_or_undone(
                partial(migrations.ask, store, spec, entry, read, migration, request,
                        pick.host.name),
                partial(claims.revert_holding, placement, uuid, migration_id)) is not None:
            return Asked(uuid, source, pick.host.uuid, pick.host.name, live, request,
                         migration_id)
    raise UsageError(f"instance {uuid} kept changing while asking for its move; try again")


def _destination(store: KeyValueStore, place: Place, spec: dict[str, Any], source: str,
                 wanted: tuple[str, str] | None) -> Pick:
    if wanted is None:
        return place(spec, frozenset({source}))
    rp, name = wanted
    if rp == source:
        raise UsageError(f"instance {spec['uuid']} is on {name} already")
    if not is_alive(store, rp):
        raise NoValidHost([f"host {name} is down"])
    if under_maintenance(store, rp):
        raise NoValidHost([f"host {name} is disabled"])
    try:  # Placement asked about that host's tree, as Nova's requested destination
        return place(spec, frozenset({source}), destination=rp)
    except NoValidHost as exc:
        raise NoValidHost([f"host {name} would not take it: {reason}"
                           for reason in exc.reasons or ["no room"]]) from None


def abort(store: KeyValueStore, uuid: str, why: str | None = None) -> str:
    """Call the instance's move off: the source's request gets a cancel (its host stops
    the move; the guest stays there), the migration is failing. The state it was in."""
    check_uuid(uuid)
    migration, entry = migrations.read(store, uuid)
    if migration is None or entry is None:
        raise NotFound(f"instance {uuid} is not moving")
    source_entry, spec = _spec(store, migration["source"], uuid)
    reason = why or f"cancelled by {operator_name() or 'an operator'}"
    if migration["state"] == migrations.FAILING or (spec.get("request") or {}).get("cancel"):
        return migration["state"]
    if spec.get("action") != states.MIGRATE or \
            (spec.get("request") or {}).get("id") != migration["request_id"]:
        raise states.ActionRefused(f"instance {uuid}: its move is not the request its host "
                                   "holds now")
    if migrations.call_off(store, source_entry, spec, reason, entry, migration) is None:
        raise UsageError(f"instance {uuid} changed while calling its move off; try again")
    return migration["state"]


def _awaiting(store: KeyValueStore, uuid: str, what: str
              ) -> tuple[dict[str, Any], Any, Any, dict[str, Any], records.RecordRead,
                         records.RecordRead]:
    """(migration, its entry, the source's spec entry, spec, record, the destination's
    record) of a move that awaits its confirm or revert; ActionRefused otherwise."""
    check_uuid(uuid)
    migration, entry = migrations.read(store, uuid)
    if migration is None or entry is None:
        if records.locate(store, uuid) is None:
            raise NotFound(f"no instance {uuid}")
        raise states.ActionRefused(f"instance {uuid} has no move awaiting a {what}")
    if migration["state"] != migrations.FINISHED:
        raise states.ActionRefused(f"instance {uuid}: its move is {migration['state']}, not "
                                   f"awaiting a {what}")
    source = records.read_record(store, migration["source"], uuid)
    there = records.read_record(store, migration["destination"], uuid)
    spec_entry, spec = records.read_spec(store, migration["source"], uuid)
    if source.state != states.MIGRATED or there.state != states.INCOMING or \
            spec_entry is None or spec is None:
        raise states.ActionRefused(f"instance {uuid}: its move is not as it was left "
                                   f"awaiting a {what} (source {source.state}, destination "
                                   f"{there.state})")
    return migration, entry, spec_entry, spec, source, there


def confirm(store: KeyValueStore, placement: PlacementClient, uuid: str,
            by: str | None = None) -> str:
    """A move awaiting its confirm handed over (the instance's keys to the destination, a
    confirm-resize event by `by`; the source's stopped copy goes with its spec), then the
    source's claim freed. The destination's name. ActionRefused when none awaits one."""
    for _ in range(ATTEMPTS):
        migration, entry, spec_entry, spec, source, there = _awaiting(store, uuid, "confirm")
        if migrations.hand_over(store, entry, migration, spec_entry, spec, source, there,
                                confirmed_by=by or operator_name()) is None:
            continue
        try:
            claims.release_hold(placement, migration["id"])
        except (PlacementUnavailable, PlacementError) as exc:
            raise UsageError(f"instance {uuid}: moved, but the source's claim (consumer "
                             f"{migration['id']}) was not freed: {exc}; free it with "
                             f"DELETE /allocations/{migration['id']}") from None
        return str(migration.get("destination_name") or migration["destination"])
    raise UsageError(f"instance {uuid} kept changing while confirming its move; try again")


def revert(store: KeyValueStore, placement: PlacementClient, uuid: str,
           by: str | None = None, also: Also | None = None) -> Reverted:
    """A move awaiting its confirm reverted: the instance's claim back on the source (the
    migration consumer's, one Placement request), the move given up (a revert-resize event
    by `by`; the destination destroys the guest it defined), the source's record SHUTOFF.
    If the guest ran before the move, the migration stays, `reverting`, with the revert's
    request: the controller starts the source's copy with it once the destination's copy
    is gone (controller/migrations.py), never before; `also` (the compute API's view,
    given that request) goes in the same transaction. Nothing is awaited here."""
    for _ in range(ATTEMPTS):
        migration, entry, spec_entry, spec, source, there = _awaiting(store, uuid, "revert")
        there_entry, there_spec = records.read_spec(store, migration["destination"], uuid)
        pending = None
        if there_entry is not None and there_spec is not None and \
                there_spec.get("action") == states.INCOMING_ACTION:
            pending = (there_entry, there_spec)
        try:
            claims.revert_holding(placement, uuid, migration["id"])
        except ConflictError:
            continue  # a claim changed meanwhile: read it all again
        except NotFound:
            pass  # given back already (a revert cut short): the etcd side is left
        who = by or operator_name()
        why = f"reverted by {who or 'an operator'}"
        ran = ((source.record or {}).get("task") or {}).get("from") == states.ACTIVE
        request = action_txn.new_request(who) if ran else None
        if migrations.give_up(store, entry, pending, why, stranded=source, reverted_by=who,
                              reverting=request,
                              also=also(request) if also and request else ([], [])) is None:
            continue
        return Reverted(uuid, migration["source"], str(migration["destination"]), request)
    raise UsageError(f"instance {uuid} kept changing while reverting its move; try again")


def check_not_reverting(store: KeyValueStore, uuid: str) -> None:
    """ActionRefused while the instance's move is `reverting`: its source's copy waits,
    stopped, for the destination to discard its own (then the controller starts it);
    nothing else is asked of it meanwhile (a start would run two copies)."""
    migration, _ = migrations.read(store, uuid)
    if migration is not None and migration["state"] == migrations.REVERTING:
        there = migration.get("destination_name") or migration["destination"]
        raise states.ActionRefused(
            f"instance {uuid}: its move is being reverted; it is started again once "
            f"{there} has discarded its copy")


@dataclass
class Reverted:
    """A revert written: the source, the destination, and the request the source's start
    goes by once the destination discarded (None: the guest did not run, nothing starts)."""

    uuid: str
    source: str
    destination: str
    request: dict[str, Any] | None

    @property
    def ran(self) -> bool:
        return self.request is not None


@dataclass
class Moved:
    """How a move ended: where the instance is, its state, the move's event."""

    host: str | None
    record: dict[str, Any] | None
    event: dict[str, Any] | None

    @property
    def ok(self) -> bool:
        return self.event is not None and self.event["result"] == events.SUCCESS and \
            self.record is not None and (
                self.record["state"] in (states.ACTIVE, states.SHUTOFF) or self.awaiting)

    @property
    def awaiting(self) -> bool:
        """A cold move asked with `verify` that awaits its confirm or revert."""
        return self.record is not None and self.record["state"] == states.MIGRATED and \
            bool((self.record.get("task") or {}).get("finished"))


def moved_where(store: KeyValueStore, asked: Asked
          ) -> tuple[dict[str, Any] | None, str | None, records.RecordRead]:
    """The move's migration (None once it ended) and where the instance is as the move
    sees it: the source's record while it moves and after a move given up (the
    destination's INCOMING one may outlive it until discarded); once the source's record
    left with the migration, the destination's (handed over). Host None: neither has it."""
    migration, _ = migrations.read(store, asked.uuid)
    read = records.read_record(store, asked.source, asked.uuid)
    if migration is not None or read.record is not None or read.fault is not None:
        return migration, asked.source, read
    read = records.read_record(store, asked.destination, asked.uuid)
    return None, (asked.destination if read.record is not None else None), read


def progress(store: KeyValueStore, placement: PlacementClient, asked: Asked
             ) -> tuple[str | None, records.RecordRead, Moved | None]:
    """(the move's stage, the instance's record where the move sees it, how it ended: None
    while it goes on). A move that moved ends once the source's claim is freed too, as
    Nova completes a migration only then: the controller frees it just after its
    hand-over in etcd, and in between the stage is FREEING_THE_SOURCE."""
    migration, host, read = moved_where(store, asked)
    stage = (migration or {}).get("state")
    if stage == migrations.FINISHED and migration is not None and \
            migration.get("request_id") == asked.request["id"]:
        found = [e for e in events.read(store, asked.source, asked.uuid)
                 if e.get("request_id") == asked.request["id"]]
        return stage, read, Moved(asked.destination, read.record, found[-1] if found else None)
    if migration is not None or read.state in (states.MIGRATING, states.MIGRATED):
        return stage, read, None  # in flight, or the hand-over or give-up being written
    found = [e for e in events.read(store, host, asked.uuid)
             if e.get("request_id") == asked.request["id"]] if host else []
    moved = Moved(host, read.record, found[-1] if found else None)
    if moved.ok and not _source_freed(placement, asked):
        return FREEING_THE_SOURCE, read, None
    return stage, read, moved


def _source_freed(placement: PlacementClient, asked: Asked) -> bool:
    """The move's migration consumer holds nothing (Placement unreachable or failing: not
    known yet, asked again at the next look)."""
    try:
        return not placement.get_allocations(asked.migration)["allocations"]
    except (PlacementUnavailable, PlacementError):
        return False


def wait(store: KeyValueStore, placement: PlacementClient, asked: Asked, timeout: float,
         on_change: Callable[[str, str | None, dict[str, Any] | None], None],
         interval: float = 0.2) -> Moved:
    """Follow the move to its end (`progress`); `on_change` (stage, record) on every
    change seen."""
    deadline = time.monotonic() + timeout
    seen: tuple[Any, ...] = ()
    while True:
        stage, read, moved = progress(store, placement, asked)
        now = (stage, read.state)
        if now != seen:
            seen = now
            on_change(asked.uuid, stage, read.record)
        if moved is not None:
            return moved
        if time.monotonic() > deadline:
            raise WaitTimeout(f"instance {asked.uuid} still moving ({now[0]}, {now[1]}) "
                              f"after {timeout:g} s; it goes on without us")
        time.sleep(interval)

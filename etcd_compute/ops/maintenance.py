"""The operator's host commands: disable, enable, show, drain.

    schedule.py host disable HOST [--reason TEXT]   skipped by the scheduler, shown as such
    schedule.py host enable HOST
    schedule.py host show HOST                      state, since when, instances, reason
    schedule.py host drain HOST [--mode live|cold|rebuild] [--parallel N]
                                                    disable, then move each instance away

A disabled host keeps its inventory in Placement; it carries the standard
trait COMPUTE_STATUS_DISABLED (which the scheduler's DisabledFilter skips),
and a `/maintenance/<rp>` key says who disabled it, when and why (the host
reads it at start and keeps the trait). A drain moves each instance away: live
(the default: running ones live, stopped ones cold, their disks with them) or cold
(ops/migrations.py), or, `--mode rebuild`, it asks the host to give each up (spec
action "evacuate": the guest is removed there first, then handed to the
controller, which places it again: its disk is lost; instances whose policy is
`error` are left where they are). An instance never runs in two places.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from etcd_compute import events, hosts, messages
from etcd_compute.errors import (
    EtcdComputeError,
    NotFound,
    NoValidHost,
    UsageError,
)
from etcd_compute.etcd import KeyValueStore
from etcd_compute.instances import actions as action_txn
from etcd_compute.instances import records, states
from etcd_compute.keys import UUID
from etcd_compute.ops import migrations
from etcd_compute.placement import DISABLED_TRAIT, PlacementClient
from etcd_compute.scheduler.spec import operator_name


class DrainTimeout(EtcdComputeError):
    """The drain ran out of time; what was asked goes on without us."""


def resolve(placement: PlacementClient, host: str) -> dict[str, Any]:
    """The provider named `host` (a uuid or a name); NotFound otherwise."""
    if UUID.match(host):
        found = placement.get_provider(host)
        if found is not None:
            return found
    else:
        named = placement.list_providers(name=host)
        if named:
            return named[0]
    raise NotFound(f"no host {host!r} (neither a provider uuid nor a provider name)")


def disable(store: KeyValueStore, placement: PlacementClient, host: str, reason: str | None,
            draining: bool = False, by: str | None = None) -> dict[str, Any]:
    """`host` disabled (skipped by the scheduler) with `reason`, by `by` (else this
    process's operator); its provider."""
    provider = resolve(placement, host)
    message = {"since": time.time(), "reason": reason, "by": by or operator_name(),
               "draining": draining}
    hosts.disable(store, provider["uuid"], message)
    placement.set_traits(provider["uuid"], placement.get_traits(provider["uuid"])
                         | {DISABLED_TRAIT})
    return provider


def enable(store: KeyValueStore, placement: PlacementClient, host: str) -> dict[str, Any]:
    provider = resolve(placement, host)
    hosts.enable(store, provider["uuid"])
    placement.set_traits(provider["uuid"], placement.get_traits(provider["uuid"])
                         - {DISABLED_TRAIT})
    return provider


def show(store: KeyValueStore, placement: PlacementClient, host: str) -> dict[str, Any]:
    provider = resolve(placement, host)
    rp = provider["uuid"]
    alive = hosts.heartbeat(store, rp)
    maintenance = hosts.maintenance(store, rp)
    held = store.read_prefix(messages.INSTANCE_RECORD, store.keys.records(rp))
    return {
        "uuid": rp, "name": provider["name"],
        "state": ("down" if alive is None else "disabled" if maintenance else "up"),
        "up_since": alive["since"] if alive else None,
        "disabled": DISABLED_TRAIT in placement.get_traits(rp),
        "maintenance": maintenance,
        "instances": sorted(({"uuid": uuid, "name": r.get("name"), "state": r["state"]}
                             for uuid, r in held.items()), key=lambda r: r["uuid"]),
    }


LIVE, COLD, REBUILD = "live", "cold", "rebuild"
DRAIN_MODES = (LIVE, COLD, REBUILD)


def drain(store: KeyValueStore, placement: PlacementClient, host: str, timeout: float,
          progress: Callable[[str], None],
          place: Callable[[dict[str, Any], frozenset[str]], Any] | None = None,
          mode: str = LIVE, parallel: int = 2) -> dict[str, int]:
    """Disable `host` and move its instances elsewhere; the counts of what happened
    ("moved", "error", "left", "gone").

    `live` (the default): each running instance moves live, each stopped one cold, its disk
    with it (ops/migrations.py), `parallel` at a time; one no other host would take, or
    whose move fails, stays (running) and counts as left. `cold`: each moves cold.
    `rebuild`: each whose policy is `rebuild` is given up by the host and built again
    elsewhere from its image (its disk lost), as a dead host's; `place` (Scheduler.place)
    is asked first whether another host would take it (it is removed before it is built
    elsewhere: moving one nothing has room for would lose it). An instance not built yet
    is always rebuilt (nothing of it to copy)."""
    if mode not in DRAIN_MODES:
        raise UsageError(f"--mode {mode!r}: one of {', '.join(DRAIN_MODES)}")
    if store.get(store.keys.leader()) is None:
        raise UsageError("drain needs the controller (schedule.py serve): it places the "
                         "instances again; start one first")
    if mode != REBUILD and place is None:
        raise UsageError(f"a {mode} drain needs the scheduler to place each instance")
    provider = disable(store, placement, host, "drain", draining=True)
    rp = provider["uuid"]
    asked: list[str] = []
    moves: list[tuple[str, bool]] = []
    summary = {"moved": 0, "error": 0, "left": 0, "gone": 0}
    for uuid, record in sorted(store.read_prefix(messages.INSTANCE_RECORD,
                                                 store.keys.records(rp)).items()):
        entry, spec = records.read_spec(store, rp, uuid)
        if spec is not None and record["state"] in states.TRANSIENT:
            summary["left"] += 1
            progress(f"{uuid} left on {provider['name']} ({record['state']}: drain again "
                     "once its action is done)")
            continue
        if spec is None or record["state"] not in (states.SCHEDULED, states.BUILDING,
                                                   states.ACTIVE, states.SHUTOFF,
                                                   states.SUSPENDED, states.PAUSED):
            continue
        if mode != REBUILD and record["state"] == states.SUSPENDED:
            # Nova moves no suspended server: its memory is in this host's managed save.
            summary["left"] += 1
            progress(f"{uuid} left on {provider['name']} (SUSPENDED: resume it and drain "
                     "again, or drain --mode rebuild, which builds it again stopped)")
            continue
        if mode != REBUILD and record["state"] == states.PAUSED:
            # Our moves take no paused guest (Nova's live migration does).
            summary["left"] += 1
            progress(f"{uuid} left on {provider['name']} (PAUSED: unpause it and drain "
                     "again, or drain --mode rebuild, which builds it again running, its "
                     "memory lost)")
            continue
        if mode != REBUILD and record["state"] in (states.ACTIVE, states.SHUTOFF):
            moves.append((uuid, mode == LIVE and record["state"] == states.ACTIVE))
            continue
        if spec.get("on_host_failure") == "error":
            summary["left"] += 1
            progress(f"{uuid} left on {provider['name']} (its on-host-failure is error)")
            continue
        if place is not None:
            try:
                place(spec, frozenset({rp}))
            except NoValidHost:
                summary["left"] += 1
                progress(f"{uuid} left on {provider['name']} (no other host would take it "
                         "now)")
                continue
        if action_txn.request_evacuate(store, entry, spec, operator_name()) is not None:
            asked.append(uuid)
            progress(f"{uuid} evacuating from {provider['name']}")
    deadline = time.monotonic() + timeout
    if moves:
        assert place is not None
        _move_all(store, placement, place, provider, moves, max(1, parallel), deadline,
                  summary, progress)
    _wait_rebuilt(store, rp, asked, deadline, timeout, summary, progress)
    return summary


def _wait_rebuilt(store: KeyValueStore, rp: str, asked: list[str], deadline: float,
                  timeout: float, summary: dict[str, int],
                  progress: Callable[[str], None]) -> None:
    """Follow each evacuated instance until it runs elsewhere, ended in ERROR or is gone;
    counted as they end."""
    pending = list(asked)
    while pending:
        for uuid in list(pending):
            location, read = records.find(store, uuid)
            if location is None:
                summary["gone"] += 1
            elif location != rp and read.state in (states.ACTIVE, states.SHUTOFF):
                summary["moved"] += 1
                progress(f"{uuid} {read.state} on {read.record.get('host_name') or location}")
            elif read.state == states.ERROR:
                summary["error"] += 1
                progress(f"{uuid} ERROR: {read.record.get('error')}")
            else:
                continue
            pending.remove(uuid)
        if pending:
            if time.monotonic() > deadline:
                raise DrainTimeout(f"{len(pending)} instance(s) still moving after "
                                   f"{timeout:g} s; they go on without us")
            time.sleep(0.2)


def _move_all(store: KeyValueStore, placement: PlacementClient, place: Any,
              provider: dict[str, Any], moves: list[tuple[str, bool]], parallel: int,
              deadline: float, summary: dict[str, int], progress: Callable[[str], None]
              ) -> None:
    """Each instance moved (live or cold), `parallel` in flight; counted as they end."""
    rp, name = provider["uuid"], provider["name"]
    waiting, in_flight = list(moves), []
    while waiting or in_flight:
        while waiting and len(in_flight) < parallel:
            uuid, live = waiting.pop(0)
            try:
                asked = migrations.migrate(store, placement, place, uuid, live)
            except NoValidHost:
                summary["left"] += 1
                progress(f"{uuid} left on {name} (no other host would take it now)")
                continue
            except (states.ActionRefused, UsageError, NotFound) as exc:
                summary["left"] += 1
                progress(f"{uuid} left on {name} ({exc})")
                continue
            in_flight.append(asked)
            progress(f"{uuid} moving {'live' if live else 'cold'} to "
                     f"{asked.destination_name}")
        for asked in list(in_flight):
            uuid = asked.uuid
            _stage, read, moved = migrations.progress(store, placement, asked)
            if moved is None:
                continue
            in_flight.remove(asked)
            location = moved.host
            if location is None:
                summary["gone"] += 1
            elif location != rp and read.state in (states.ACTIVE, states.SHUTOFF):
                summary["moved"] += 1
                progress(f"{uuid} {read.state} on {read.record.get('host_name') or location}")
            else:
                summary["left"] += 1
                error = next((e.get("error") for e in reversed(events.read(store, rp, uuid))
                              if e["action"] == states.MIGRATE), None)
                progress(f"{uuid} left on {name} (its move failed: {error or 'given up'})")
        if in_flight:
            if time.monotonic() > deadline:
                raise DrainTimeout(f"{len(in_flight) + len(waiting)} instance(s) still "
                                   "moving; they go on without us")
            time.sleep(0.2)



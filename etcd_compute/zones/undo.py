"""Taking back, in one zone, what a request across zones did there, when another zone failed.

Claims are freed in the zone's Placement. Instances written to its etcd are
removed as if never written while nobody has acted on them (still SCHEDULED,
spec untouched: `instances.scheduling.unschedule`); one a host already began to build is
destroyed through that host (`operations.destroy`), which frees its claim.
Each function returns what it could not take back (the zone is unreachable):
the request's intent keeps those for a later sweep (`journal.py`).
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from dataclasses import dataclass, field

from etcd_compute import claims
from etcd_compute.errors import EtcdComputeError
from etcd_compute.instances import records, scheduling, states
from etcd_compute.keys import Keys
from etcd_compute.ops import operations
from etcd_compute.zones.tree import ZONE_FAULTS, Zone

LOG = logging.getLogger(__name__)

# (host, uuid, group, record revision, spec revision): an instance as
# `instances.scheduling.unschedule` takes it back.
Placed = tuple[str, str, str | None, int, int]


@dataclass
class Undone:
    """What became of the instances of one zone: taken back (never happened), destroyed
    through their hosts, or left (unreachable: for a later sweep)."""

    taken_back: list[str] = field(default_factory=list)
    destroyed: list[str] = field(default_factory=list)
    left: list[str] = field(default_factory=list)


def unclaim(zone: Zone, uuids: list[str]) -> list[str]:
    """Free the claims of `uuids` in the zone's Placement; those that could not be freed."""
    if not uuids:
        return []
    try:
        return claims.unclaim(zone.placement, uuids)
    except ZONE_FAULTS:
        return list(uuids)


def unwrite(zone: Zone, uuids: list[str]) -> Undone:
    """Remove the instances `uuids` from the zone's etcd (their claims stay: see `take_back`).
    Those never written there count as taken back."""
    done = Undone()
    try:
        store = zone.store
        fresh: list[Placed] = []
        for uuid in uuids:
            location = records.locate(store, uuid)
            if location is None:
                done.taken_back.append(uuid)  # never written (or already gone)
                continue
            host = location["host"]
            read = records.read_record(store, host, uuid)
            spec = store.get(store.keys.spec(host, uuid))
            if read.state == states.SCHEDULED and spec is not None:
                fresh.append((host, uuid, location.get("group"), read.revision,
                              spec.mod_revision))
            else:
                done.destroyed.append(uuid)
        for batch in _within(store.keys, fresh, zone.scheduler.settings["etcd_max_txn_ops"]):
            if scheduling.unschedule(store, batch) is not None:
                done.taken_back += [item[1] for item in batch]
                continue
            # One of them moved meanwhile: each on its own.
            for item in batch:
                if scheduling.unschedule(store, [item]) is None:
                    done.destroyed.append(item[1])
                else:
                    done.taken_back.append(item[1])
        for uuid in list(done.destroyed):
            outcome = operations.destroy(store, zone.placement, uuid)
            LOG.info("zone %s: instance %s had been taken by its host; destroy %s",
                     zone.label, uuid, outcome)
    except ZONE_FAULTS as exc:
        LOG.warning("zone %s: cannot take back %d instance(s) now (%s); kept for a later "
                    "sweep", zone.label, len(uuids), exc)
        handled = set(done.taken_back) | set(done.destroyed)
        done.left = [uuid for uuid in uuids if uuid not in handled] + done.destroyed
        done.destroyed = []
    except EtcdComputeError as exc:  # the instance changed too often: leave it for the sweep
        LOG.warning("zone %s: %s", zone.label, exc)
        done.left = [uuid for uuid in uuids if uuid not in done.taken_back]
        done.destroyed = []
    return done


def _within(keys: Keys, placed: list[Placed], max_ops: int) -> Iterator[list[Placed]]:
    """`placed` in batches whose unschedule transaction etcd accepts (--max-txn-ops)."""
    batch: list[Placed] = []
    ops = 0
    for item in placed:
        item_ops = len(scheduling.unschedule_txn(keys, [item]).success)
        if batch and ops + item_ops > max_ops:
            yield batch
            batch, ops = [], 0
        batch.append(item)
        ops += item_ops
    if batch:
        yield batch


def take_back(zone: Zone, uuids: list[str], written: bool) -> list[str]:
    """Undo a request's instances `uuids` in `zone`: remove them from its etcd if they may
    have been `written`, then free their claims. The uuids left (for a later sweep)."""
    done = unwrite(zone, uuids) if written else Undone(taken_back=list(uuids))
    return done.left + unclaim(zone, done.taken_back)

"""Taking instances back as if never placed: what a request that must not have happened left.

Used where a request was answered but its asker cannot stand by it: a request across zones
whose other zones failed (`zones/undo.py`), a schedule.py that could not read the service's
answer (`queue_client.py`). Instances nobody has acted on yet (still SCHEDULED, spec
untouched) are removed as if never written (`instances.scheduling.unschedule`), then their
claims freed; one a host already began to build is destroyed through that host
(`operations.destroy`), which frees its claim.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from dataclasses import dataclass, field

from etcd_compute import claims
from etcd_compute.etcd import KeyValueStore
from etcd_compute.instances import records, scheduling, states
from etcd_compute.keys import Keys
from etcd_compute.ops import operations
from etcd_compute.placement import PlacementClient

LOG = logging.getLogger(__name__)

# (host, uuid, group, record revision, spec revision): an instance as
# `instances.scheduling.unschedule` takes it back.
Placed = tuple[str, str, str | None, int, int]


@dataclass
class Undone:
    """What became of the instances: taken back (never happened), destroyed through their
    hosts, or left (unreachable: for a later try)."""

    taken_back: list[str] = field(default_factory=list)
    destroyed: list[str] = field(default_factory=list)
    left: list[str] = field(default_factory=list)


def unwrite(store: KeyValueStore, placement: PlacementClient, uuids: list[str],
            max_txn_ops: int) -> Undone:
    """Remove the instances `uuids` from etcd (their claims stay: see `take_back`), or have
    their hosts destroy those already taken up. Those never written count as taken back.
    Raises what the store or Placement raise (the caller decides what unreachable means)."""
    done = Undone()
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
    for batch in within(store.keys, fresh, max_txn_ops):
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
        outcome = operations.destroy(store, placement, uuid)
        LOG.info("instance %s had been taken by its host; destroy %s", uuid, outcome)
    return done


def take_back(store: KeyValueStore, placement: PlacementClient, uuids: list[str],
              max_txn_ops: int) -> Undone:
    """`unwrite`, then free the claims of what was taken back (a destroyed one's host frees
    its own). What could not be freed is `left`."""
    done = unwrite(store, placement, uuids, max_txn_ops)
    if done.taken_back:
        done.left = claims.unclaim(placement, done.taken_back)
    return done


def within(keys: Keys, placed: list[Placed], max_ops: int) -> Iterator[list[Placed]]:
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

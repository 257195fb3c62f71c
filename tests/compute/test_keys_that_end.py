"""Every key of a destroyed instance ends with its DELETED record (real etcd with RBAC,
Placement, a fake-driver compute and `schedule.py serve`).

The host removes its spec, /booted/ and /console/ keys and writes the DELETED record
and events on a lease of `deleted_record_ttl`; it may not touch the operator's keys
(location, group member), which the controller binds to the same lease when it sees
the record. Keys are counted by prefix: after many create/destroy cycles and the TTL,
nothing of a destroyed instance is left, even with the controller stopped by then
(nothing waits for it to forget them).
"""

from __future__ import annotations

import json
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from etcd_compute.config import deep_merge
from etcd_compute.etcd import Store
from etcd_compute.instances import scheduling
from etcd_compute.ops import operations
from tests.compute.helpers import make_spec
from tests.support import wait_for

CYCLES, BATCH = 500, 50
TTL = 10  # seconds a DELETED record lives here (an hour by default)
# The cycles' test reads the last batch's records after all 50 are DELETED, in one read of
# the prefix (one read per instance took over 10 s under load, and the first records had
# expired before it looked); the controller binds its keys meanwhile. The records' TTL is
# the test's tail: it waits it out.
CYCLES_TTL = 20


def keys_of(store: Store, uuids: set[str]) -> list[str]:
    """Every key under the test's prefix that names one of `uuids`."""
    entries, _ = store.get_prefix(store.keys.everything(), keys_only=True)
    return [e.key for e in entries if e.key.rsplit("/", 1)[-1] in uuids]


def states_of(store: Store, rp: str) -> dict[str, str]:
    """Each record's state, by uuid: only that field is read (the cycles poll it 4 times a
    second over hundreds of records; checking each against its schema, as the product's
    reads do, was most of this test's own CPU)."""
    entries, _ = store.get_prefix(store.keys.records(rp))
    return {entry.key.rsplit("/", 1)[-1]: json.loads(entry.value)["state"]
            for entry in entries}


def place(store: Store, placement: Any, rp: str, count: int, cycle: int) -> list[str]:
    """What the scheduler writes for `count` instances: claims, then specs, SCHEDULED
    records, locations (and group members for every other one) in one transaction."""
    specs = [make_spec(rp, **({"group": {"name": f"g{cycle % 3}", "policy": "affinity"}}
                              if n % 2 == 0 else {})) for n in range(count)]
    # One POST /allocations for the lot, as the scheduler claims a --count.
    placement.claim_many({spec["uuid"]: spec["allocations"] for spec in specs}, "p", "u")
    assert scheduling.schedule(store, [(spec, "host") for spec in specs]) is not None
    return [spec["uuid"] for spec in specs]


def test_no_key_of_a_destroyed_instance_outlives_its_record(start_compute, start_controller,
                                                           compute_config, store, placement):
    config = deep_merge(compute_config, {"compute": {
        "deleted_record_ttl": CYCLES_TTL, "workers": 4,
        "inventory": {"VCPU": {"total": 2 * BATCH}, "MEMORY_MB": {"total": 128 * BATCH},
                      "DISK_GB": {"total": 2 * BATCH}}}})
    rp = config["compute"]["uuid"]
    compute = start_compute(config)
    controller = start_controller()
    wait_for(lambda: store.get(store.keys.alive(rp)), 30, what="heartbeat")
    wait_for(lambda: store.get(store.keys.leader()), 30, what="a leading controller")
    destroyed: set[str] = set()
    started = time.monotonic()
    for cycle in range(CYCLES // BATCH):
        uuids = place(store, placement, rp, BATCH, cycle)
        # Polled every 0.25 s: each poll decodes every record of the host (hundreds by the
        # end), CPU the compute under test would rather have.
        wait_for(lambda u=uuids: all(states_of(store, rp).get(x) == "ACTIVE" for x in u), 60,
                 interval=0.25, what=f"cycle {cycle}: {BATCH} instances ACTIVE")
        # Destroyed as many operators at once would (the cycles' wall time is the compute's).
        with ThreadPoolExecutor(8) as operators:
            done = list(operators.map(lambda u: operations.destroy(store, placement, u), uuids))
        assert done == ["requested"] * len(uuids)
        wait_for(lambda u=uuids: all(states_of(store, rp).get(x, "DELETED") == "DELETED"
                                     for x in u), 60,
                 interval=0.25, what=f"cycle {cycle}: {BATCH} instances DELETED")
        destroyed.update(uuids)
    assert len(destroyed) == CYCLES
    cycled = time.monotonic() - started

    # The last ones' records are still there: every key of theirs is on the record's
    # lease, so none waits for someone to read it after the record is gone.
    def all_on_their_records_lease(last: list[str]) -> bool:
        entries, _ = store.get_prefix(store.keys.everything(), keys_only=True)
        lease_of = {entry.key: entry.lease for entry in entries}
        leases: dict[str, set[int]] = {uuid: set() for uuid in last}
        for entry in entries:
            leases.get(entry.key.rsplit("/", 1)[-1], set()).add(entry.lease)
        for uuid in last:
            record_lease = lease_of.get(store.keys.record(rp, uuid))
            assert record_lease is not None, f"the record of {uuid} expired before we looked"
            if not record_lease or leases[uuid] != {record_lease}:
                return False
        return True

    wait_for(lambda: all_on_their_records_lease(uuids), CYCLES_TTL / 2,
             what="the last instances' keys on their records' leases")
    controller.stop()  # it does not need to be there when the records expire
    wait_for(lambda: keys_of(store, destroyed) == [], CYCLES_TTL + 30,
             what="every key of the destroyed instances to expire")
    for uuid in list(destroyed)[:20]:
        assert placement.get_allocations(uuid)["allocations"] == {}
    assert compute.alive() and "Traceback" not in compute.log()
    print(f"{CYCLES} create/destroy cycles in {cycled:.1f} s")


def test_destroy_wait_lets_the_location_go_with_the_record_without_a_controller(
        start_compute, compute_config, store, placement, run_schedule):
    config = deep_merge(compute_config, {"compute": {"deleted_record_ttl": TTL}})
    rp = config["compute"]["uuid"]
    start_compute(config)
    wait_for(lambda: store.get(store.keys.alive(rp)), 30, what="heartbeat")
    [uuid] = place(store, placement, rp, 1, 1)
    wait_for(lambda: states_of(store, rp).get(uuid) == "ACTIVE", 30, what="ACTIVE")
    run = run_schedule("destroy", uuid, "--wait")
    assert run.code == 0, run.stderr
    lease = store.get(store.keys.record(rp, uuid)).lease
    assert lease and store.get(store.keys.location(uuid)).lease == lease
    assert store.get(store.keys.group_member("g1", uuid)).lease == lease
    wait_for(lambda: keys_of(store, {uuid}) == [], TTL + 30, what="its keys to expire")

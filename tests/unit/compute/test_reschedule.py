"""Handing a failed build to an alternate host: when it happens and when it does not."""

from __future__ import annotations

import logging
import uuid as uuidlib

from etcd_compute import instances, messages
from etcd_compute.compute.reschedule import reschedule
from tests.support import make_spec
from tests.unit.fakes import FakePlacement, FakeStore

LOG = logging.LoggerAdapter(logging.getLogger("test"), {})
INVENTORY = {"VCPU": {"total": 4}, "MEMORY_MB": {"total": 1024}, "DISK_GB": {"total": 10}}


def setup(alive: bool = True) -> tuple[FakeStore, FakePlacement, dict, str]:
    store, placement = FakeStore(), FakePlacement()
    here, there = str(uuidlib.uuid4()), str(uuidlib.uuid4())
    for rp in (here, there):
        placement.ensure_provider(rp, rp[:8])
        placement.set_inventory(rp, INVENTORY)
    if alive:
        store.put(messages.ALIVE, store.keys.alive(there), {"host": there, "name": "b",
                                                            "since": 1.0})
    spec = make_spec(here)
    spec["alternates"] = [{"host": there, "allocations": {there: {"resources": spec["resources"]}}}]
    placement.claim(spec["uuid"], spec["allocations"], "p", "u")
    instances.schedule(store, [(spec, "a")])
    entry = store.get(store.keys.spec(here, spec["uuid"]))
    instances.begin_build(store, spec, entry.mod_revision,
                          instances.read_record(store, here, spec["uuid"]), "a")
    return store, placement, spec, there


def test_moves_claim_spec_record_and_location():
    store, placement, spec, there = setup()
    assert reschedule(store, placement, spec, LOG) == there
    assert set(placement.get_allocations(spec["uuid"])["allocations"]) == {there}
    assert instances.read_record(store, there, spec["uuid"]).record["host"] == there
    assert store.get(store.keys.spec(there, spec["uuid"])) is not None
    assert store.get_prefix(store.keys.host(spec["host"]))[0] == []
    assert instances.find(store, spec["uuid"])[0] == there


def test_an_alternate_without_heartbeat_is_skipped():
    store, placement, spec, _ = setup(alive=False)
    assert reschedule(store, placement, spec, LOG) is None
    assert set(placement.get_allocations(spec["uuid"])["allocations"]) == {spec["host"]}
    assert instances.locate(store, spec["uuid"])["host"] == spec["host"]


def test_only_a_building_instance_moves():
    store, placement, spec, _ = setup()
    instances.mark_deleting(store, spec, instances.read_record(store, spec["host"], spec["uuid"]))
    assert reschedule(store, placement, spec, LOG) is None
    assert set(placement.get_allocations(spec["uuid"])["allocations"]) == {spec["host"]}


def test_a_spec_without_owner_ids_is_not_moved():
    store, placement, spec, _ = setup()
    del spec["project_id"]
    assert reschedule(store, placement, spec, LOG) is None

"""A host builds only what Placement says it holds the claim for."""

from __future__ import annotations

import uuid as uuidlib

from etcd_compute import messages
from etcd_compute.compute.checks import BUILD, LATER, REFUSED, check_claim, claimed_here
from etcd_compute.instances import records
from tests.support import make_spec
from tests.unit.fakes import FakePlacement, FakeStore

HERE, THERE = str(uuidlib.uuid4()), str(uuidlib.uuid4())


def setup(claim_on: str | None, resources: dict | None = None):
    store, placement = FakeStore(), FakePlacement()
    for rp in (HERE, THERE):
        placement.ensure_provider(rp, rp[:8])
        placement.set_inventory(rp, {"VCPU": {"total": 4}, "MEMORY_MB": {"total": 1024},
                                     "DISK_GB": {"total": 10}})
    spec = make_spec(HERE)
    if claim_on:
        placement.claim(spec["uuid"], {claim_on: {"resources": resources or spec["resources"]}},
                        "p", "u")
    store.put(messages.INSTANCE_SPEC, store.keys.spec(HERE, spec["uuid"]), spec)
    revision = store.get(store.keys.spec(HERE, spec["uuid"])).mod_revision
    return store, placement, spec, revision


def test_a_spec_claimed_here_with_its_resources_is_built():
    store, placement, spec, revision = setup(HERE)
    assert check_claim(store, placement, spec, revision, placed_here=True) == BUILD
    assert claimed_here(placement, HERE, spec["uuid"]) is not None
    assert claimed_here(placement, THERE, spec["uuid"]) is None


def test_a_spec_without_a_claim_ends_in_error():
    store, placement, spec, revision = setup(None)
    assert check_claim(store, placement, spec, revision, placed_here=False) == REFUSED
    read = records.read_record(store, HERE, spec["uuid"])
    assert read.state == "ERROR" and "no claim" in read.record["error"]
    assert store.get(store.keys.spec(HERE, spec["uuid"])) is None


def test_a_stray_copy_claimed_elsewhere_is_dropped_without_a_record():
    store, placement, spec, revision = setup(THERE)
    assert check_claim(store, placement, spec, revision, placed_here=False) == REFUSED
    assert store.get(store.keys.spec(HERE, spec["uuid"])) is None
    assert records.read_record(store, HERE, spec["uuid"]).record is None
    assert set(placement.get_allocations(spec["uuid"])["allocations"]) == {THERE}


def test_an_instance_placed_here_whose_claim_is_elsewhere_for_now_is_looked_at_later():
    # The controller moves the claim first, then spec and record (and undoes the claim if
    # that fails): dropping the spec in between would strand the instance.
    store, placement, spec, revision = setup(THERE)
    assert check_claim(store, placement, spec, revision, placed_here=True) == LATER
    assert store.get(store.keys.spec(HERE, spec["uuid"])) is not None
    assert set(placement.get_allocations(spec["uuid"])["allocations"]) == {THERE}


def test_a_spec_asking_more_than_its_claim_ends_in_error_with_the_claim_freed():
    store, placement, spec, revision = setup(HERE, {"VCPU": 1})
    assert check_claim(store, placement, spec, revision, placed_here=True) == REFUSED
    assert "but the claim holds VCPU:1" in records.read_record(
        store, HERE, spec["uuid"]).record["error"]
    assert placement.get_allocations(spec["uuid"])["allocations"] == {}

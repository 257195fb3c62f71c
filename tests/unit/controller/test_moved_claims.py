"""A claim the controller moved for a write that did not happen, put back (FakeStore,
FakePlacement): to the old host while the instance lives there, released once it ended,
never over a claim someone changed since, and to the old host when etcd cannot say."""

from __future__ import annotations

import uuid as uuidlib

from etcd_compute import claims
from etcd_compute.controller import moved_claims
from etcd_compute.errors import EtcdUnavailable
from etcd_compute.instances import records, scheduling
from tests.support import make_spec
from tests.unit.fakes import FakePlacement, FakeStore


def moved_away(state: str | None = "SCHEDULED"):
    """An instance scheduled on `here` whose claim the controller moved to `there`."""
    store, placement = FakeStore(), FakePlacement()
    here, there = str(uuidlib.uuid4()), str(uuidlib.uuid4())
    for rp in (here, there):
        placement.ensure_provider(rp, rp[:8])
        placement.set_inventory(rp, {"VCPU": {"total": 4}, "MEMORY_MB": {"total": 1024},
                                     "DISK_GB": {"total": 10}})
    spec = make_spec(here)
    placement.claim(spec["uuid"], spec["allocations"], "p", "u")
    scheduling.schedule(store, [(spec, "h")])
    if state is None:
        store.delete(store.keys.record(here, spec["uuid"]))
    generation = claims.move(placement, spec["uuid"], {there: {"resources": spec["resources"]}},
                             "p", "u")
    return store, placement, spec, here, generation


def held(placement: FakePlacement, spec: dict) -> set[str]:
    return set(placement.get_allocations(spec["uuid"])["allocations"])


def test_a_live_instance_gets_its_old_hosts_claim_back():
    store, placement, spec, here, generation = moved_away()
    assert moved_claims.put_back(store, placement, spec, generation) is True
    assert held(placement, spec) == {here}


def test_an_instance_that_ended_meanwhile_has_its_claim_released():
    store, placement, spec, here, generation = moved_away(state=None)
    assert moved_claims.put_back(store, placement, spec, generation) is True
    assert held(placement, spec) == set()


def test_a_claim_someone_changed_since_is_left_as_it_is():
    store, placement, spec, here, generation = moved_away()
    placement.delete_allocations(spec["uuid"])  # a destroy freed it meanwhile
    assert moved_claims.put_back(store, placement, spec, generation) is False
    assert held(placement, spec) == set()


def test_etcd_unreachable_puts_it_back_on_the_old_host(monkeypatch):
    store, placement, spec, here, generation = moved_away()

    def unreachable(*_args, **_kwargs):
        raise EtcdUnavailable("etcd: unreachable")

    monkeypatch.setattr(records, "read_record", unreachable)
    assert moved_claims.put_back(store, placement, spec, generation) is True
    assert held(placement, spec) == {here}


def test_several_moved_together_are_each_put_back():
    store, placement, spec, here, generation = moved_away()
    moved_claims.put_back_all(store, placement, [spec], {spec["uuid"]: generation})
    assert held(placement, spec) == {here}


def test_put_back_needs_the_generation_of_the_move():
    store, placement, spec, here, generation = moved_away()
    assert moved_claims.put_back(store, placement, spec, (generation or 0) + 5) is False
    assert held(placement, spec) != {here}

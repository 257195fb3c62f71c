"""Quotas: limits (defaults, a project's own), usage from Placement, creates admitted one
at a time through reservations, counted once whether claimed or not."""

from __future__ import annotations

import json
import uuid as uuidlib

import pytest

from etcd_compute.api.objects.quotas import OverQuota, Quotas
from tests.unit.api.harness import api_config
from tests.unit.fakes import FakePlacement, FakeStore

HOST = str(uuidlib.uuid4())


def quotas(**limits: int) -> tuple[Quotas, FakeStore, FakePlacement]:
    store, placement = FakeStore(), FakePlacement()
    placement.ensure_provider(HOST, "hv1")
    placement.set_inventory(HOST, {"VCPU": {"total": 100}, "MEMORY_MB": {"total": 100000}})
    settings = api_config()["api"]
    settings["quotas"] = {**settings["quotas"], **limits}
    return Quotas(store, placement, settings), store, placement


def claim(placement: FakePlacement, consumer: str, vcpus: int = 1, ram: int = 256,
          project: str = "p1") -> None:
    placement.claim(consumer, {HOST: {"resources": {"VCPU": vcpus, "MEMORY_MB": ram}}},
                    project, "u1")


def test_limits_are_the_projects_own_else_the_defaults():
    kept, store, _ = quotas(instances=4)
    assert kept.limits("p1")["instances"] == 4
    kept.update("p1", {"instances": 7})
    assert kept.limits("p1")["instances"] == 7 and kept.limits("p2")["instances"] == 4
    store.put_raw(store.keys.quota("p3"), "{bad")
    assert kept.limits("p3")["instances"] == 4  # unreadable: the defaults
    kept.reset("p1")
    assert kept.limits("p1")["instances"] == 4


def test_usage_is_placements_by_novas_names():
    kept, _, placement = quotas()
    claim(placement, str(uuidlib.uuid4()), vcpus=2, ram=512)
    claim(placement, str(uuidlib.uuid4()), project="p2")
    assert kept.usage("p1") == {"instances": 1, "cores": 2, "ram": 512}


def test_max_count_shrinks_to_what_fits_down_to_min_count():
    kept, _, placement = quotas(instances=5, cores=-1)
    claim(placement, str(uuidlib.uuid4()))
    assert kept.allowed("p1", vcpus=1, ram=256, min_count=1, max_count=10) == 4
    with pytest.raises(OverQuota) as caught:
        kept.allowed("p1", vcpus=1, ram=256, min_count=5, max_count=10)
    assert str(caught.value) == ("Quota exceeded for instances: Requested 5-10, but already "
                                 "used 1 of 5 instances")


def test_reservations_count_until_claimed_and_never_twice():
    kept, store, placement = quotas(instances=3)
    first = [str(uuidlib.uuid4())]
    with kept.reserve("p1", "u1", first, 1, 256, 1) as reservation:
        assert kept.usage("p1")["instances"] == 1  # reserved, not claimed
        claim(placement, first[0])
        assert kept.usage("p1")["instances"] == 1  # claimed: Placement counts it, once
        kept.recheck(reservation)
        with kept.reserve("p1", "u1", [str(uuidlib.uuid4()), str(uuidlib.uuid4())], 1, 256,
                          2):
            with pytest.raises(OverQuota):
                with kept.reserve("p1", "u1", [str(uuidlib.uuid4())], 1, 256, 1):
                    pass
    assert store.get_prefix(store.keys.quota_reservations("p1"))[0] == []


def test_a_reservation_is_refused_if_another_came_in_between():
    kept, store, _ = quotas(instances=1)
    real_count = kept.count
    sneaked = []

    def count_then_race(project_id, leave_out=None, exact=True):
        counted = real_count(project_id, leave_out, exact)
        if not sneaked:  # another API process reserves after we counted
            other = {"consumers": [str(uuidlib.uuid4())],
                     "resources": {"consumer_count": 1}, "created_at": 1}
            sneaked.append(store.put_raw(store.keys.quota_reservation("p1", "other"),
                                         json.dumps(other)))
        return counted

    kept.count = count_then_race
    with pytest.raises(OverQuota, match="instances"):
        with kept.reserve("p1", "u1", [str(uuidlib.uuid4())], 1, 256, 1):
            pass


def test_a_recheck_after_the_claim_catches_a_lowered_limit():
    kept, _, placement = quotas(instances=2)
    mine = [str(uuidlib.uuid4())]
    with kept.reserve("p1", "u1", mine, 1, 256, 1) as reservation:
        claim(placement, mine[0])
        claim(placement, str(uuidlib.uuid4()))
        kept.update("p1", {"instances": 1})
        with pytest.raises(OverQuota):
            kept.recheck(reservation)


def test_unlimited_projects_hold_no_reservation_and_far_limits_need_no_exact_count():
    kept, store, placement = quotas(instances=-1, cores=-1, ram=-1)
    with kept.reserve("p1", "u1", [str(uuidlib.uuid4())], 1, 256, 1):
        assert store.get_prefix(store.keys.quota_reservations("p1"))[0] == []
    kept.update("p1", {"instances": 100, "cores": 100, "ram": 100000})
    looked = []
    real = placement.get_allocations
    placement.get_allocations = lambda consumer: looked.append(consumer) or real(consumer)
    with kept.reserve("p1", "u1", [str(uuidlib.uuid4())], 1, 256, 1) as first:
        with kept.reserve("p1", "u1", [str(uuidlib.uuid4())], 1, 256, 1):
            kept.recheck(first)
    assert looked == []  # far from the limits: no claim was looked up


def test_a_reservation_counts_against_the_limits_its_create_read():
    """The handler reads the project's limits once per create and hands them on: the
    reservation is admitted against those (and records them for the recheck)."""
    kept, store, _ = quotas(instances=3)
    reads = []
    real = kept.limits
    kept.limits = lambda project: reads.append(project) or real(project)  # type: ignore[method-assign]
    limits = real("p1")
    with kept.reserve("p1", "u1", [str(uuidlib.uuid4())], 1, 256, 1, limits) as reservation:
        assert reservation.limits == limits
    assert reads == []
    with pytest.raises(OverQuota):
        with kept.reserve("p1", "u1", [str(uuidlib.uuid4()) for _ in range(2)], 1, 256, 2,
                          {**limits, "instances": 1}):
            pass

"""A request across zones in memory: the plan split by weight, claims and writes in every
chosen zone, all or nothing; a lost zone left out; a lost race planned again."""

from __future__ import annotations

import random
from collections import Counter

import pytest

from etcd_compute import messages
from etcd_compute.errors import ConflictError, NoValidHost, UsageError
from etcd_compute.scheduler import RequestSpec, Scheduler
from etcd_compute.zones.federation import Federation
from tests.unit.fake_clock import InstantClock
from tests.unit.zones.world import QUERY, World


def three_zones() -> World:
    """hq (no hosts) with a (two hosts) and b, and c below b (one host each): room for 4 per
    host, 16 in all."""
    world = World()
    world.zone("parent")
    world.child("parent", "a").add_host("a0")
    world["a"].add_host("a1")
    world.child("parent", "b").add_host("b0")
    world.child("b", "c").add_host("c0")
    return world


def everything(world: World) -> dict[str, tuple[int, int]]:
    """(claims, specs) per zone: the two must agree."""
    return {name: (len(zone.placement.consumers), len(zone.specs()))
            for name, zone in world.zones.items()}


def federation(world: World, **zones) -> Federation:
    return Federation(world.tree(**zones), random.Random(1), InstantClock())


def test_a_count_no_zone_can_take_is_split_by_weight_and_indexed():
    world = three_zones()
    placed = federation(world).select_destinations(
        RequestSpec.build(QUERY, count=10, name="web"))
    assert [p.destination.name for p in placed] == [f"web-{n}" for n in range(1, 11)]
    assert {p.zone for p in placed} == {"a", "b", "b/c"}
    # Four equal hosts in three zones: 2 or 3 each, whichever zone they are in.
    per_host = Counter(p.destination.host for p in placed)
    assert len(per_host) == 4 and set(per_host.values()) == {2, 3}
    counts = everything(world)
    assert all(claimed == written for claimed, written in counts.values())
    assert sum(claimed for claimed, _ in counts.values()) == 10
    parent = world["parent"].store
    index = parent.read_prefix(messages.ZONE_INSTANCE, parent.keys.zone_index())
    assert {u: w["zone"] for u, w in index.items()} == {p.destination.uuid: p.zone
                                                       for p in placed}
    assert parent.get_prefix(parent.keys.zone_intents())[0] == []


def test_more_than_all_zones_hold_claims_nothing_and_says_why_per_zone():
    world = three_zones()
    with pytest.raises(NoValidHost) as caught:
        federation(world).select_destinations(RequestSpec.build(QUERY, count=17))
    reasons = caught.value.reasons
    assert reasons[0] == ("room for only 16 of the 17 instances requested across 4 zone(s); "
                          "nothing was claimed")
    assert "zone a: room for 8" in reasons and "zone b/c: room for 4" in reasons
    assert any(r.startswith("zone hq: resources=DISK_GB:1: no resource provider") for r in reasons)
    assert everything(world) == {name: (0, 0) for name in world.zones}


def test_a_zone_down_before_the_request_is_skipped_with_the_reason():
    world = three_zones()
    world["b"].store.down = True
    placed = federation(world).select_destinations(RequestSpec.build(QUERY, count=8))
    assert {p.zone for p in placed} == {"a"}
    with pytest.raises(NoValidHost) as caught:
        federation(world).select_destinations(RequestSpec.build(QUERY, count=1))
    assert "zone b: unreachable, skipped (etcd at zone is unreachable)" in caught.value.reasons


def test_a_zone_lost_at_its_claim_completes_elsewhere_and_keeps_the_unknown_for_a_sweep():
    world = three_zones()
    original = Scheduler.claim

    def claim(self, destinations):
        if self.store is world["c"].store:
            world["c"].placement.down = True
        return original(self, destinations)

    Scheduler.claim = claim  # type: ignore[method-assign]
    try:
        placed = federation(world).select_destinations(RequestSpec.build(QUERY, count=12))
    finally:
        Scheduler.claim = original  # type: ignore[method-assign]
    assert {p.zone for p in placed} == {"a", "b"} and len(placed) == 12
    parent = world["parent"].store
    (intent,), _ = parent.get_prefix(parent.keys.zone_intents())
    kept = messages.decode(messages.ZONE_INTENT, intent.value)
    assert kept["abandoned"] and list(kept["zones"]) == ["b/c"]
    world["c"].placement.down = False
    assert world["c"].specs() == [] and world["c"].placement.consumers == {}


def test_a_zone_whose_etcd_fails_at_the_write_takes_back_every_zone():
    world = three_zones()
    original = Scheduler.claim

    def claim(self, destinations):
        original(self, destinations)
        if self.store is world["a"].store:
            world["a"].store.down = True

    Scheduler.claim = claim  # type: ignore[method-assign]
    try:
        with pytest.raises(NoValidHost) as caught:
            federation(world).select_destinations(RequestSpec.build(QUERY, count=10))
    finally:
        Scheduler.claim = original  # type: ignore[method-assign]
    assert any(r.startswith("zone a: unreachable, skipped (lost during the request")
               for r in caught.value.reasons)
    # b and b/c wrote and claimed, then took it all back; a's claims wait for the sweep.
    for name in ("b", "c"):
        assert (world[name].placement.consumers, world[name].specs()) == ({}, [])
    assert len(world["a"].placement.consumers) > 0


def test_a_lost_race_is_planned_again_and_gives_up_after_claim_retries():
    world = three_zones()
    original = Scheduler.claim
    races = []

    def claim(self, destinations):
        if self.store is world["b"].store and len(races) < 2:
            races.append(1)
            raise ConflictError("raced", 409, "placement.concurrent_update")
        return original(self, destinations)

    Scheduler.claim = claim  # type: ignore[method-assign]
    try:
        fed = federation(world)
        placed = fed.select_destinations(RequestSpec.build(QUERY, count=16))
        assert len(placed) == 16 and fed.replans == 2
        # A random backoff before each plan again, growing with the races lost.
        first, second = fed.clock.slept
        assert 0 <= first <= 0.1 and 0 <= second <= 0.2
        races.clear()
        Scheduler.claim = lambda self, d: (_ for _ in ()).throw(  # type: ignore[method-assign]
            ConflictError("raced", 409))
        world2 = three_zones()
        with pytest.raises(ConflictError, match="lost the race for capacity 3 times"):
            federation(world2).select_destinations(RequestSpec.build(QUERY, count=2))
        assert everything(world2) == {name: (0, 0) for name in world2.zones}
    finally:
        Scheduler.claim = original  # type: ignore[method-assign]


def test_affinity_keeps_a_request_in_the_zone_of_its_group():
    world = three_zones()
    fed = federation(world)
    group = ("db", "affinity")
    first = fed.select_destinations(RequestSpec.build(QUERY, count=2, group=group))
    (zone,) = {p.zone for p in first}
    again = fed.select_destinations(RequestSpec.build(QUERY, count=2, group=group))
    assert {p.zone for p in again} == {zone}
    assert len({p.destination.host for p in [*first, *again]}) == 1
    with pytest.raises(NoValidHost) as caught:
        fed.select_destinations(RequestSpec.build(QUERY, count=1, group=group))
    assert "group db has affinity: its instances stay in one zone" in caught.value.reasons[1]


def test_anti_affinity_spreads_across_zones_and_holds_within_each():
    world = three_zones()
    placed = federation(world).select_destinations(
        RequestSpec.build(QUERY, count=4, group=("web", "anti-affinity")))
    assert len({p.destination.host for p in placed}) == 4


def test_route_limits_the_request_to_a_zone_and_below():
    world = three_zones()
    placed = federation(world).select_destinations(RequestSpec.build(QUERY, count=5),
                                                   route="b")
    assert {p.zone for p in placed} == {"b", "b/c"}
    with pytest.raises(UsageError, match="no zone b/x"):
        federation(world).select_destinations(RequestSpec.build(QUERY), route="b/x")


def test_a_count_over_etcds_txn_limit_is_refused_before_anything():
    world = three_zones()
    fed = Federation(world.tree(), random.Random(1), InstantClock())
    fed.settings = {**fed.settings, "etcd_max_txn_ops": 6}
    with pytest.raises(UsageError, match="--count 3 needs 9 etcd operations"):
        fed.select_destinations(RequestSpec.build(QUERY, count=3))


def test_every_unreachable_zone_is_named_when_the_rest_cannot_fit():
    world = three_zones()
    world["a"].store.down = True
    world["b"].placement.down = True
    with pytest.raises(NoValidHost) as caught:
        federation(world).select_destinations(RequestSpec.build(QUERY, count=5))
    lines = caught.value.reasons
    assert lines[0].startswith("room for only 4 of the 5")
    assert [line for line in lines if "unreachable" in line] == [
        "zone a: unreachable, skipped (etcd at zone is unreachable)",
        "zone b: unreachable, skipped (Placement is unreachable)"]

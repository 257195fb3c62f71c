"""One plan for a dead host's instances: one candidates query per shape, each instance seeing
what the others took, its group honoured, the dead host left out."""

from __future__ import annotations

from collections import Counter

from etcd_compute.errors import NoValidHost
from etcd_compute.scheduler.evacuation import place_many
from etcd_compute.scheduler.planner import Pick
from tests.support import make_spec
from tests.unit.fakes import FakePlacement, FakeStore
from tests.unit.scheduler.test_scheduler import add_host, make_scheduler


def world(hosts: int = 2, vcpu: int = 2):
    store, placement = FakeStore("/t"), FakePlacement()
    dead = add_host(placement, store, "dead", vcpu=16, alive=False)
    live = [add_host(placement, store, f"h{i}", vcpu=vcpu) for i in range(hosts)]
    return store, placement, make_scheduler(store, placement), dead, live


def test_one_candidates_query_per_shape_and_instances_deplete_each_other():
    store, placement, scheduler, dead, live = world(hosts=2, vcpu=2)
    small = [make_spec(dead, resources={"VCPU": 1, "MEMORY_MB": 64, "DISK_GB": 1})
             for _ in range(3)]
    big = make_spec(dead, resources={"VCPU": 2, "MEMORY_MB": 64, "DISK_GB": 1})
    asked = []
    real = placement.allocation_candidates
    placement.allocation_candidates = lambda query: asked.append(query) or real(query)
    placed = place_many(scheduler, [*small, big], frozenset({dead}))
    assert len(asked) == 2  # two shapes, not four instances
    picks = [p for p in placed.values() if isinstance(p, Pick)]
    used = Counter()
    for pick in picks:
        assert pick.host.uuid != dead
        used[pick.host.uuid] += sum(a["resources"]["VCPU"] for a in pick.allocations.values())
    assert all(amount <= 2 for amount in used.values())  # never more than a host holds
    assert sum(isinstance(p, NoValidHost) for p in placed.values()) == 1  # 5 VCPU, room for 4


def test_anti_affinity_members_planned_together_go_to_different_hosts():
    store, placement, scheduler, dead, live = world(hosts=3, vcpu=8)
    group = {"name": "web", "policy": "anti-affinity"}
    specs = [make_spec(dead, group=group) for _ in range(3)]
    placed = place_many(scheduler, specs, frozenset({dead}))
    hosts = [p.host.uuid for p in placed.values()]
    assert sorted(hosts) == sorted(live)


def test_an_instance_created_on_the_dead_host_by_name_is_recovered_elsewhere():
    """Its create named the host (the API's 2.74 `host`: `in_tree` in its kept query):
    that bound only the create, as Nova keeps no requested destination."""
    store, placement, scheduler, dead, live = world(hosts=1, vcpu=8)
    spec = make_spec(dead, query=f"resources=VCPU:1,MEMORY_MB:128,DISK_GB:1&in_tree={dead}")
    (placed,) = place_many(scheduler, [spec], frozenset({dead})).values()
    assert isinstance(placed, Pick) and placed.host.uuid == live[0]

"""The zone tree: walked in parallel from here down, a route to one subtree, unreachable
zones and loops named rather than waited on or followed."""

from __future__ import annotations

import threading

import pytest

from etcd_compute.errors import EtcdUnavailable, UsageError
from etcd_compute.zones.tree import ZoneUnreachable
from tests.unit.zones.world import World


def tree_of_four() -> World:
    world = World()
    world.zone("parent")
    world.child("parent", "a")
    world.child("parent", "b")
    world.child("b", "c")
    world.child("c", "d")
    return world


def test_every_zone_is_visited_once_with_its_path():
    world = tree_of_four()
    with world.tree() as tree:
        walk = tree.walk(lambda zone: zone.name)
    assert walk.results == {"": "hq", "a": "a", "b": "b", "b/c": "c", "b/c/d": "d"}
    assert walk.unreachable == {}


def test_zones_are_visited_at_the_same_time():
    world = tree_of_four()
    barrier = threading.Barrier(5, timeout=5)
    with world.tree() as tree:
        walk = tree.walk(lambda zone: barrier.wait() is not None)
    assert len(walk.results) == 5  # all five waited for each other: none ran alone


def test_a_route_visits_that_zone_and_below_only():
    world = tree_of_four()
    with world.tree() as tree:
        assert set(tree.walk(lambda z: 1, route="b").results) == {"b", "b/c", "b/c/d"}
        assert set(tree.walk(lambda z: 1, route="b/c/d").results) == {"b/c/d"}
        with pytest.raises(UsageError, match="--zone: no zone b/x"):
            tree.walk(lambda z: 1, route="b/x")


def test_an_unreachable_zone_and_what_is_below_it_are_skipped_with_the_reason():
    world = tree_of_four()
    world["b"].store.down = True
    with world.tree() as tree:
        walk = tree.walk(lambda zone: zone.store.get_prefix("/x")[1])
    assert set(walk.results) == {"", "a"}
    assert walk.unreachable == {"b": "etcd at zone is unreachable"}


def test_a_visit_that_fails_on_one_zone_spares_the_others():
    world = tree_of_four()

    def visit(zone):
        if zone.name == "c":
            raise EtcdUnavailable("gone")
        return zone.name

    with world.tree() as tree:
        walk = tree.walk(visit)
    assert set(walk.results) == {"", "a", "b", "b/c/d"}
    assert walk.unreachable == {"b/c": "gone"}


def test_this_zones_own_etcd_down_is_an_error_not_a_skip():
    world = tree_of_four()
    world["parent"].store.down = True
    with world.tree() as tree, pytest.raises(EtcdUnavailable):
        tree.walk(lambda zone: 1)


def test_a_loop_back_up_is_named_not_followed():
    world = tree_of_four()
    world.child("d", "back", etcd={"endpoints": ["b:2379"]})
    with world.tree() as tree:
        walk = tree.walk(lambda zone: 1)
    assert walk.unreachable == {"b/c/d/back": "a loop: its etcd is that of a zone above it "
                                              "(b:2379 prefix '')"}
    assert "b/c/d/back" not in walk.results


def test_find_connects_along_the_path():
    world = tree_of_four()
    with world.tree() as tree:
        assert tree.find("b/c").store is world["c"].store
        assert tree.find("").store is world["parent"].store
        with pytest.raises(UsageError, match="no zone b/q"):
            tree.find("b/q")
        world["c"].store.down = True
        with pytest.raises(ZoneUnreachable, match="zone b/c is unreachable"):
            tree.find("b/c/d")


def test_a_route_through_an_unreachable_zone_says_so():
    world = tree_of_four()
    world["b"].store.down = True
    with world.tree() as tree:
        walk = tree.walk(lambda z: 1, route="b/c")
    assert walk.results == {} and walk.unreachable == {"b": "etcd at zone is unreachable"}

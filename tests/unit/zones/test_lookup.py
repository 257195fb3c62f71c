"""Finding an instance from the parent: here, the index, or a search below; lists of every
zone with each record's zone."""

from __future__ import annotations

import pytest

from etcd_compute import messages
from etcd_compute.errors import NotFound
from etcd_compute.scheduler import RequestSpec
from etcd_compute.zones import lookup
from etcd_compute.zones.tree import ZoneUnreachable
from tests.unit.zones.world import QUERY, World

GHOST = "00000000-0000-4000-8000-0000000000ff"


def world_with_instances():
    world = World()
    world.zone("parent").add_host("h")
    world.child("parent", "a").add_host("h")
    world.child("a", "b").add_host("h")
    with world.tree() as tree:
        here = tree.root.scheduler.select_destinations(RequestSpec.build(QUERY))[0].uuid
        below = tree.find("a/b").scheduler.select_destinations(RequestSpec.build(QUERY))[0].uuid
    return world, here, below


def test_here_first_then_the_index_then_a_search():
    world, here, below = world_with_instances()
    with world.tree() as tree:
        assert lookup.zone_of(tree, here) is tree.root
        assert lookup.zone_of(tree, below).path == "a/b"  # no index: found by searching
        parent = world["parent"].store
        parent.put(messages.ZONE_INSTANCE, parent.keys.zone_of(below), {"zone": "a/b"})
        world["a"].store.down = True  # a search would now fail; the index goes straight...
        with pytest.raises(ZoneUnreachable, match="zone a is unreachable"):
            lookup.zone_of(tree, below)  # ...through a, which is down: said so
        world["a"].store.down = False
        assert lookup.zone_of(tree, below).path == "a/b"
        assert lookup.indexed(tree, below) == "a/b"


def test_unknown_everywhere_is_this_zones_answer_unless_a_zone_could_not_be_searched():
    world, _, _ = world_with_instances()
    with world.tree() as tree:
        assert lookup.zone_of(tree, GHOST) is tree.root
        world["b"].store.down = True
        with pytest.raises(NotFound, match=r"in the zones below that could be searched "
                                           r"\(a/b unreachable\)"):
            lookup.zone_of(tree, GHOST)


def test_forget_drops_a_stale_index_entry():
    world, _, below = world_with_instances()
    parent = world["parent"].store
    parent.put(messages.ZONE_INSTANCE, parent.keys.zone_of(below), {"zone": "a/b"})
    with world.tree() as tree:
        lookup.forget(tree, below)
        assert lookup.indexed(tree, below) is None


def test_list_has_each_records_zone_and_names_the_zones_it_could_not_read():
    world, here, below = world_with_instances()
    with world.tree() as tree:
        records, unreachable = lookup.list_all(tree)
        assert {(r["uuid"], r["zone"]) for r in records} == {(here, "hq"), (below, "a/b")}
        assert unreachable == {}
        world["b"].store.down = True
        records, unreachable = lookup.list_all(tree)
        assert [r["uuid"] for r in records] == [here]
        assert unreachable == {"a/b": "etcd at zone is unreachable"}
        world["b"].store.down = False
        with pytest.raises(NotFound, match="no host 'nowhere' in any zone"):
            lookup.list_all(tree, host="nowhere")
        assert [r["uuid"] for r in lookup.list_all(tree, host="b-h")[0]] == [below]


def test_without_zones_a_list_is_as_it_always_was():
    world = World()
    world.zone("parent").add_host("h")
    with world.tree() as tree:
        tree.root.scheduler.select_destinations(RequestSpec.build(QUERY))
        records, _ = lookup.list_all(tree)
    assert "zone" not in records[0]

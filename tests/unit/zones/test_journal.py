"""The intent of a request across zones: finished with its index, or swept later: rolled
forward when everything was written, taken back when not; kept while a zone is away."""

from __future__ import annotations

import time

from etcd_compute import messages
from etcd_compute.scheduler import RequestSpec
from etcd_compute.zones import journal
from tests.unit.zones.world import QUERY, World


def world_with_instances(count: int = 2) -> tuple[World, list[str]]:
    """a below hq, with `count` instances scheduled in a directly (as a request would)."""
    world = World()
    world.zone("parent")
    world.child("parent", "a").add_host("h")
    with world.tree() as tree:
        placed = tree.find("a").scheduler.select_destinations(
            RequestSpec.build(QUERY, count=count))
    return world, [d.uuid for d in placed]


def intents(world: World) -> dict[str, dict]:
    store = world["parent"].store
    return store.read_prefix(messages.ZONE_INTENT, store.keys.zone_intents())


def test_finish_indexes_and_drops_the_intent_in_one_transaction():
    world = World()
    store = world.zone("parent").store
    intent = journal.begin(store, {"a": ["00000000-0000-4000-8000-000000000001"], "": [
        "00000000-0000-4000-8000-000000000002"]})
    assert list(intents(world)) == [intent]
    journal.finish(store, intent, {"00000000-0000-4000-8000-000000000001": "a",
                                   "00000000-0000-4000-8000-000000000002": ""})
    assert intents(world) == {}
    # Only instances below here are indexed: this zone's own are found as ever.
    index = store.read_prefix(messages.ZONE_INSTANCE, store.keys.zone_index())
    assert {uuid: where["zone"] for uuid, where in index.items()} == {
        "00000000-0000-4000-8000-000000000001": "a"}
    assert len(store.committed[-1].success) == 2


def test_a_fresh_intent_is_left_alone_a_stale_one_rolled_forward_when_all_exist():
    world, uuids = world_with_instances()
    store = world["parent"].store
    journal.begin(store, {"a": uuids})
    with world.tree() as tree:
        assert journal.sweep(tree, grace=300) == []
        done = journal.sweep(tree, grace=300, now=time.time() + 301)
    assert done[0].endswith("had completed; 2 instance(s) indexed")
    assert intents(world) == {}
    assert set(store.read_prefix(messages.ZONE_INSTANCE, store.keys.zone_index())) == set(uuids)
    assert len(world["a"].placement.consumers) == 2  # nothing was taken back


def test_an_abandoned_intent_is_taken_back_at_once():
    world, uuids = world_with_instances()
    store = world["parent"].store
    intent = journal.begin(store, {"a": uuids})
    journal.abandon(store, intent, {"a": uuids})
    with world.tree() as tree:
        done = journal.sweep(tree, grace=300)
    assert done == [f"request {intent}: undone in a"]
    assert world["a"].placement.consumers == {} and world["a"].specs() == []
    assert world["a"].store.get_prefix(world["a"].store.keys.locations())[0] == []


def test_a_stale_intent_with_an_instance_missing_is_taken_back():
    world, uuids = world_with_instances()
    journal.begin(world["parent"].store, {"a": [*uuids, "00000000-0000-4000-8000-00000000000f"]})
    with world.tree() as tree:
        journal.sweep(tree, grace=0)
    assert world["a"].placement.consumers == {} and world["a"].specs() == []
    assert intents(world) == {}


def test_an_intent_is_kept_while_its_zone_is_away():
    world, uuids = world_with_instances()
    intent = journal.begin(world["parent"].store, {"a": uuids})
    journal.abandon(world["parent"].store, intent, {"a": uuids})
    world["a"].store.down = True
    with world.tree() as tree:
        assert journal.sweep(tree, grace=0) == []
    assert list(intents(world)) == [intent]
    world["a"].store.down = False
    world["a"].placement.down = True  # etcd back, Placement not: half done, kept
    with world.tree() as tree:
        done = journal.sweep(tree, grace=0)
    assert "partly undone; 2 instance(s) left for later" in done[0]
    assert world["a"].specs() == []
    world["a"].placement.down = False
    with world.tree() as tree:
        journal.sweep(tree, grace=0)
    assert intents(world) == {} and world["a"].placement.consumers == {}


def test_an_unreadable_intent_is_dropped():
    world = World()
    store = world.zone("parent").store
    store.put_raw(store.keys.zone_intent("x"), "{\"zones\": 1}")
    assert journal.pending(store, grace=0) == {}
    assert store.get(store.keys.zone_intent("x")) is None


def test_an_intent_for_a_zone_deleted_since_is_dropped():
    world, uuids = world_with_instances()
    store = world["parent"].store
    intent = journal.begin(store, {"a": uuids})
    journal.abandon(store, intent, {"a": uuids})
    store.delete(store.keys.zone("a"))
    with world.tree() as tree:
        done = journal.sweep(tree, grace=0)
    assert done == [f"request {intent}: dropped (no zone a (see schedule.py zone list))"]
    assert intents(world) == {}

"""Taking back one zone's part: removed as if never written while nobody acted on it,
destroyed through its host once one did, claims freed, the rest left when unreachable."""

from __future__ import annotations

from etcd_compute import messages
from etcd_compute.instances import host as host_txn
from etcd_compute.instances import records
from etcd_compute.scheduler import RequestSpec
from etcd_compute.zones import undo
from tests.unit.zones.world import QUERY, World


def scheduled(count: int = 2, group=None):
    world = World()
    world.zone("parent").add_host("h")
    world["parent"].add_host("g")
    with world.tree() as tree:
        placed = tree.root.scheduler.select_destinations(
            RequestSpec.build(QUERY, count=count, group=group))
    return world, world.tree(), [d.uuid for d in placed], placed


def test_scheduled_instances_are_taken_back_as_if_never_written():
    world, tree, uuids, _ = scheduled(group=("web", "anti-affinity"))
    store = world["parent"].store
    assert undo.take_back(tree.root, uuids, written=True) == []
    entries, _ = store.get_prefix("/", keys_only=True)
    assert [e.key for e in entries if "/alive/" not in e.key] == []
    assert world["parent"].placement.consumers == {}


def begin_build(store, host: str, uuid: str) -> None:
    """What the host does when it takes the instance: its record moves to BUILDING."""
    entry = store.get(store.keys.spec(host, uuid))
    spec = messages.decode(messages.INSTANCE_SPEC, entry.value)
    assert host_txn.begin_build(store, spec, entry.mod_revision,
                                 records.read_record(store, host, uuid), "h") is not None


def test_an_instance_a_host_took_is_destroyed_through_it():
    world, tree, uuids, placed = scheduled()
    store = world["parent"].store
    begin_build(store, placed[0].host, uuids[0])
    done = undo.unwrite(tree.root, uuids)
    assert (done.taken_back, done.destroyed, done.left) == ([uuids[1]], [uuids[0]], [])
    spec_now, _ = store.read("instance_spec", store.keys.spec(placed[0].host, uuids[0]))
    assert spec_now["action"] == "destroy"
    # take_back frees only what it took back: the host frees its own instance's claim.
    world2, tree2, uuids2, placed2 = scheduled()
    begin_build(world2["parent"].store, placed2[0].host, uuids2[0])
    assert undo.take_back(tree2.root, uuids2, written=True) == []
    assert list(world2["parent"].placement.consumers) == [uuids2[0]]


def test_an_unreachable_zone_leaves_everything_for_later():
    world, tree, uuids, _ = scheduled()
    world["parent"].store.down = True
    assert sorted(undo.take_back(tree.root, uuids, written=True)) == sorted(uuids)
    world["parent"].store.down = False
    world["parent"].placement.down = True
    assert sorted(undo.take_back(tree.root, uuids, written=False)) == sorted(uuids)
    world["parent"].placement.down = False
    assert len(world["parent"].specs()) == 2  # nothing was removed without its claim


def test_never_written_counts_as_taken_back():
    world, tree, _, _ = scheduled(count=1)
    ghost = "00000000-0000-4000-8000-0000000000ff"
    done = undo.unwrite(tree.root, [ghost])
    assert (done.taken_back, done.left) == ([ghost], [])


def test_taking_back_stays_within_etcds_operations_per_transaction():
    # schedule writes 3 keys per instance, unschedule deletes 6: 8 instances fit in one
    # schedule transaction of 24 operations but need two to be taken back.
    world, tree, uuids, _ = scheduled(count=8)
    store = world["parent"].store
    tree.root.scheduler.settings["etcd_max_txn_ops"] = 24
    sizes = []
    commit = store.commit

    def counted(txn):
        sizes.append(len(txn.success))
        return commit(txn)

    store.commit = counted
    done = undo.unwrite(tree.root, uuids)
    assert sorted(done.taken_back) == sorted(uuids) and done.left == []
    assert len(sizes) > 1 and max(sizes) <= 24

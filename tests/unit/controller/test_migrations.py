"""The controller's steps of a move (controller/migrations.py) in the in-memory store and
Placement, each end played by the host-side transactions the computes use: the target
relayed, a refusal called off, a live move handed over with the source freed (and not
freed when the hand-over's transaction fails), a cold move finished then handed over, a
failed move given up with the claim back."""

from __future__ import annotations

import pytest

from etcd_compute import messages
from etcd_compute.controller.decisions import Controller
from etcd_compute.controller.migrations import MoveSteps
from etcd_compute.instances import actions as action_txn
from etcd_compute.instances import migrations as move_txn
from etcd_compute.instances import records
from etcd_compute.ops import migrations as ops
from tests.unit.fakes import FakePlacement, FakeStore
from tests.unit.ops.test_migrations import world
from tests.unit.ops.test_operations import OTHER, RP

TARGET = {"address": "10.0.0.2", "instance_dir": "/srv/i", "base_sha256": None,
          "dhcp_server": None, "network": None}


@pytest.fixture
def moving():
    store, placement, spec, place, _ = world()
    asked = ops.migrate(store, placement, place, spec["uuid"], live=True)
    return store, placement, spec["uuid"], asked, MoveSteps(store, placement)


def source_spec(store: FakeStore, uuid: str):
    entry = store.get(store.keys.spec(RP, uuid))
    return entry, messages.decode(messages.INSTANCE_SPEC, entry.value)


def begin(store: FakeStore, uuid: str) -> None:
    entry, spec = source_spec(store, uuid)
    assert action_txn.begin_action(store, spec, entry.mod_revision,
                                   records.read_record(store, RP, uuid)) is not None


def test_nothing_moves_until_the_destination_answers_then_its_target_is_relayed(moving):
    store, placement, uuid, asked, steps = moving
    assert steps.step(uuid) is None
    move_txn.answer(store, records.read_record(store, OTHER, uuid), target=TARGET)
    assert steps.step(uuid) == "relay"
    assert source_spec(store, uuid)[1]["request"]["target"] == TARGET
    assert move_txn.read(store, uuid)[0]["state"] == "migrating"
    assert steps.step(uuid) is None  # once


def test_a_destination_that_cannot_make_room_calls_the_move_off(moving):
    store, placement, uuid, asked, steps = moving
    move_txn.answer(store, records.read_record(store, OTHER, uuid), error="disk full")
    assert steps.step(uuid) == "call off"
    assert source_spec(store, uuid)[1]["request"]["cancel"] == "the destination: disk full"


def test_a_live_move_done_is_handed_over_and_the_source_freed(moving):
    store, placement, uuid, asked, steps = moving
    move_txn.answer(store, records.read_record(store, OTHER, uuid), target=TARGET)
    steps.step(uuid)
    begin(store, uuid)
    move_txn.migrated(store, records.read_record(store, RP, uuid), {"seconds": 4.0})
    assert steps.step(uuid) == "handed over"
    assert records.find(store, uuid)[0] == OTHER
    assert records.read_record(store, OTHER, uuid).state == "ACTIVE"
    assert set(placement.consumers) == {uuid}  # the migration consumer gone
    assert set(placement.get_allocations(uuid)["allocations"]) == {OTHER}
    assert move_txn.read(store, uuid) == (None, None)


def test_a_hand_over_that_loses_its_compare_keeps_the_source_s_hold(moving, monkeypatch):
    """A destroy asked between the step's reads and its hand-over transaction: the
    transaction fails, the instance stays on the source, so the migration's hold on the
    source must stay too (freed first, the source would run a guest Placement no longer
    counts there). The next step hands over with the destroy, and frees it then."""
    store, placement, uuid, asked, steps = moving
    move_txn.answer(store, records.read_record(store, OTHER, uuid), target=TARGET)
    steps.step(uuid)
    begin(store, uuid)
    move_txn.migrated(store, records.read_record(store, RP, uuid), {"seconds": 4.0})
    commit, raced = store.commit, []

    def destroy_first(txn):
        # The hand-over is the transaction that deletes the migration's key.
        if not raced and any(getattr(op, "key", None) == store.keys.migration(uuid)
                             for op in txn.success):
            raced.append(txn)
            entry, spec = source_spec(store, uuid)
            assert action_txn.request_destroy(store, entry, spec, "bob") is not None
        return commit(txn)

    monkeypatch.setattr(store, "commit", destroy_first)
    assert steps.step(uuid) is None and raced
    assert records.find(store, uuid)[0] == RP
    held = placement.get_allocations(asked.migration)["allocations"]
    assert set(held) == {RP}, "the source's hold went with the hand-over not made"
    assert steps.step(uuid) == "handed over"
    assert asked.migration not in placement.consumers
    there = messages.decode(messages.INSTANCE_SPEC,
                            store.get(store.keys.spec(OTHER, uuid)).value)
    assert there["action"] == "destroy"


def test_a_cold_move_sent_is_finished_there_then_handed_over():
    store, placement, spec, place, _ = world()
    uuid = spec["uuid"]
    ops.migrate(store, placement, place, uuid, live=False)
    steps = MoveSteps(store, placement)
    move_txn.answer(store, records.read_record(store, OTHER, uuid), target=TARGET)
    steps.step(uuid)
    begin(store, uuid)
    sent = {"files": [], "was_running": True}
    move_txn.migrated(store, records.read_record(store, RP, uuid), {}, sent)
    assert steps.step(uuid) == "finish"
    there = messages.decode(messages.INSTANCE_SPEC,
                            store.get(store.keys.spec(OTHER, uuid)).value)
    assert there["request"]["moved"] == sent
    assert steps.step(uuid) is None  # waiting for the destination to define it
    move_txn.answer(store, records.read_record(store, OTHER, uuid), finished=True,
                    ip="192.168.1.9")
    assert steps.step(uuid) == "handed over"
    assert records.read_record(store, OTHER, uuid).record["ip"] == "192.168.1.9"


def test_a_move_the_source_ended_otherwise_is_given_up_with_the_claim_back(moving):
    store, placement, uuid, asked, steps = moving
    move_txn.answer(store, records.read_record(store, OTHER, uuid), target=TARGET)
    steps.step(uuid)
    begin(store, uuid)
    entry, _ = source_spec(store, uuid)
    action_txn.end_action(store, records.read_record(store, RP, uuid), entry,
                          "Lost connection to destination host")
    assert steps.step(uuid) == "given up"
    assert set(placement.consumers) == {uuid}
    assert set(placement.get_allocations(uuid)["allocations"]) == {RP}
    there = messages.decode(messages.INSTANCE_SPEC,
                            store.get(store.keys.spec(OTHER, uuid)).value)
    assert there["request"]["cancel"] == "Lost connection to destination host"
    assert move_txn.read(store, uuid) == (None, None)


def test_a_source_that_died_moving_gives_the_move_up_before_its_recovery(moving):
    store, placement, uuid, asked, steps = moving
    begin(store, uuid)
    controller = Controller(store, placement, {"host_failure_grace_seconds": 0})
    store.delete(store.keys.alive(RP))
    controller.on_alive(RP, False)
    controller.recover_due()  # no placer: it ends in ERROR, the move given up first
    assert move_txn.read(store, uuid) == (None, None)
    assert "cancel" in messages.decode(messages.INSTANCE_SPEC, store.get(
        store.keys.spec(OTHER, uuid)).value)["request"]


def test_the_sweep_takes_each_move_s_next_step():
    store, placement = FakeStore(), FakePlacement()
    assert MoveSteps(store, placement).sweep() == 0
    store, placement, spec, place, _ = world()
    ops.migrate(store, placement, place, spec["uuid"], live=True)
    move_txn.answer(store, records.read_record(store, OTHER, spec["uuid"]), target=TARGET)
    assert MoveSteps(store, placement).sweep() == 1
    assert source_spec(store, spec["uuid"])[1]["request"]["target"] == TARGET


def destroyed_on_its_source(store: FakeStore, placement: FakePlacement, uuid: str) -> None:
    """What the source's compute does for a destroy asked during the move (ops.destroy,
    then machine.start_destroy and ends.finish_destroy): DELETING, the claim freed if it is
    on this host alone (it is not: the move left it on the destination), DELETED."""
    from etcd_compute import claims
    from etcd_compute.instances import host as host_txn

    entry, spec = source_spec(store, uuid)
    assert action_txn.request_destroy(store, entry, spec, "bob") is not None
    entry, spec = source_spec(store, uuid)
    host_txn.mark_deleting(store, spec, records.read_record(store, RP, uuid))
    assert claims.free_here(placement, uuid, RP) is False  # not this host's alone
    assert host_txn.delete(store, spec, records.read_record(store, RP, uuid), 3600) is not None


def test_a_move_whose_instance_was_destroyed_frees_both_claims(moving):
    """Given up for a destroyed instance, the move's claims both go: giving the source's
    back to the instance (as for a move called off) would hold it for nobody, forever."""
    store, placement, uuid, asked, steps = moving
    destroyed_on_its_source(store, placement, uuid)
    assert steps.step(uuid) == "given up"
    assert move_txn.read(store, uuid) == (None, None)
    assert placement.get_allocations(uuid).get("allocations") in ({}, None)
    assert asked.migration not in placement.consumers


def test_a_destroy_during_a_move_waits_for_the_source_then_goes_with_the_guest(moving):
    """The destroy came while the source's job ran (its record MIGRATING): nothing is
    relayed, called off or given up meanwhile. The guest switched over (MIGRATED): the
    instance is handed over with the destroy, the source freed; the destination's destroy
    then frees the instance's claim there: nothing held, no keys."""
    from etcd_compute import claims
    from etcd_compute.instances import host as host_txn

    store, placement, uuid, asked, steps = moving
    move_txn.answer(store, records.read_record(store, OTHER, uuid), target=TARGET)
    assert steps.step(uuid) == "relay"
    begin(store, uuid)
    entry, spec = source_spec(store, uuid)
    assert action_txn.request_destroy(store, entry, spec, "bob") is not None
    move_txn.answer(store, records.read_record(store, OTHER, uuid), error="late trouble")
    assert steps.step(uuid) is None  # the source's job decides
    assert "cancel" not in source_spec(store, uuid)[1]["request"]
    move_txn.migrated(store, records.read_record(store, RP, uuid), {"seconds": 2.0})
    assert steps.step(uuid) == "handed over"
    there = messages.decode(messages.INSTANCE_SPEC,
                            store.get(store.keys.spec(OTHER, uuid)).value)
    assert there["action"] == "destroy" and there["request"]["by"] == "bob"
    assert asked.migration not in placement.consumers
    assert set(placement.get_allocations(uuid)["allocations"]) == {OTHER}
    # The destination's compute: start_destroy, then ends.finish_destroy.
    host_txn.mark_deleting(store, there, records.read_record(store, OTHER, uuid))
    assert claims.free_here(placement, uuid, OTHER) is True
    host_txn.delete(store, there, records.read_record(store, OTHER, uuid), 3600)
    assert records.read_record(store, OTHER, uuid).state == "DELETED"
    assert uuid not in placement.consumers
    assert store.get(store.keys.spec(OTHER, uuid)) is None
    assert store.get(store.keys.spec(RP, uuid)) is None


# --- a revert of a cold move that awaited its confirm ---------------------------------------

def reverting(state: str = "ACTIVE"):
    """A cold move asked with verify, defined at the destination, then reverted."""
    from tests.unit.ops.test_migrations import awaiting_confirm

    store, placement, uuid, asked, steps = awaiting_confirm(state)
    done = ops.revert(store, placement, uuid, by="alice")
    return store, placement, uuid, asked, steps, done


def discard_there(store: FakeStore, uuid: str) -> None:
    """What the destination's compute does with the revert's cancel (job discard)."""
    entry = store.get(store.keys.spec(OTHER, uuid))
    assert move_txn.discarded(store, entry, records.read_record(store, OTHER, uuid))


def test_a_revert_starts_the_source_s_copy_only_once_the_destination_discarded():
    store, placement, uuid, asked, steps, done = reverting()
    for _ in range(2):
        assert steps.step(uuid) is None and steps.sweep() == 1
    assert source_spec(store, uuid)[1]["action"] == "migrate"  # nothing asked of it yet
    discard_there(store, uuid)
    assert steps.step(uuid) == "revert started"
    spec = source_spec(store, uuid)[1]
    assert (spec["action"], spec["request"]["id"], spec["request"]["by"]) == (
        "start", done.request["id"], "alice")
    assert move_txn.read(store, uuid) == (None, None)
    assert steps.step(uuid) is None  # once
    assert set(placement.get_allocations(uuid)["allocations"]) == {RP}
    assert asked.migration not in placement.consumers


def test_a_stopped_guest_s_revert_leaves_nothing_for_the_controller():
    store, placement, uuid, _asked, steps, done = reverting("SHUTOFF")
    assert done.request is None and move_txn.read(store, uuid) == (None, None)
    discard_there(store, uuid)
    assert steps.step(uuid) is None
    assert source_spec(store, uuid)[1]["action"] == "migrate"


def test_a_revert_whose_destination_died_starts_the_source_once_it_is_recovered():
    """Its lease lost, the destination fenced itself (its guests off): once the controller
    recovers it, the source's copy starts; its cancelled spec stays for it to discard when
    it returns (its ports handed back then)."""
    store, placement, uuid, _asked, _steps, done = reverting()
    controller = Controller(store, placement, {"host_failure_grace_seconds": 0})
    assert controller.moves.step(uuid) is None
    store.delete(store.keys.alive(OTHER))
    controller.on_alive(OTHER, False)
    controller.recover_due()
    spec = source_spec(store, uuid)[1]
    assert (spec["action"], spec["request"]["id"]) == ("start", done.request["id"])
    assert move_txn.read(store, uuid) == (None, None)
    there = messages.decode(messages.INSTANCE_SPEC, store.get(store.keys.spec(OTHER, uuid))
                            .value)
    assert there["request"]["cancel"] == "reverted by alice"
    controller.recover_due()  # again at the next tick: nothing more
    assert source_spec(store, uuid)[1]["request"]["id"] == done.request["id"]


def test_a_revert_whose_destination_is_only_down_not_recovered_yet_waits():
    store, placement, uuid, _asked, _steps, _done = reverting()
    controller = Controller(store, placement, {"host_failure_grace_seconds": 3600})
    store.delete(store.keys.alive(OTHER))
    controller.on_alive(OTHER, False)
    controller.recover_due()
    controller.sweep()
    assert source_spec(store, uuid)[1]["action"] == "migrate"
    assert move_txn.read(store, uuid)[0]["state"] == "reverting"


def test_a_destroy_while_reverting_ends_the_revert_with_nothing_started():
    """The destroy needs no discard: the source's host destroys its stopped copy and frees
    the claim (the revert put it back there alone); the destination discards its own."""
    from etcd_compute import claims
    from etcd_compute.instances import host as host_txn

    store, placement, uuid, asked, steps, _done = reverting()
    entry, spec = source_spec(store, uuid)
    assert action_txn.request_destroy(store, entry, spec, "bob") is not None
    assert steps.step(uuid) == "reverted"  # nothing will start: no key left waiting
    assert move_txn.read(store, uuid) == (None, None)
    entry, spec = source_spec(store, uuid)
    host_txn.mark_deleting(store, spec, records.read_record(store, RP, uuid))
    assert claims.free_here(placement, uuid, RP) is True
    host_txn.delete(store, spec, records.read_record(store, RP, uuid), 3600)
    discard_there(store, uuid)
    assert steps.step(uuid) is None
    assert uuid not in placement.consumers and asked.migration not in placement.consumers


def test_a_revert_whose_source_died_starts_nothing_there():
    """The source's host died while reverting: its recovery decides (here, no placer: ERROR),
    and once the destination discarded, the revert ends with nothing started."""
    store, placement, uuid, _asked, _steps, _done = reverting()
    controller = Controller(store, placement, {"host_failure_grace_seconds": 0})
    store.delete(store.keys.alive(RP))
    controller.on_alive(RP, False)
    controller.recover_due()
    discard_there(store, uuid)
    assert controller.moves.step(uuid) == "reverted"
    assert move_txn.read(store, uuid) == (None, None)
    assert records.read_record(store, RP, uuid).state == "ERROR"
    assert store.get(store.keys.spec(RP, uuid)) is None  # nothing asked to start


def test_a_revert_whose_source_is_down_writes_the_start_for_its_return():
    """The destination discarded while the source's host is down (not recovered yet): the
    start is written all the same (the destination's copy is gone): taken up if the host
    comes back; rebuilt elsewhere, the instance is stopped as its record says."""
    from etcd_compute.instances.states import wants_stopped

    store, placement, uuid, _asked, steps, done = reverting()
    store.delete(store.keys.alive(RP))
    discard_there(store, uuid)
    assert steps.step(uuid) == "revert started"
    entry, spec = source_spec(store, uuid)
    assert (spec["action"], spec["request"]["id"]) == ("start", done.request["id"])
    assert wants_stopped(records.read_record(store, RP, uuid).record, spec) is True

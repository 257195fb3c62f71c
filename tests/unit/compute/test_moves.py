"""compute/moves.py with a stand-in machine (what it submits is recorded; a job's end is
handed to it as done or failed) over the in-memory store and Placement: the destination
makes room only for a claim it holds, answers, defines a cold move's guest, discards; the
source takes the request up, moves once the target came, cancels, ends; a cold move's
stopped copy goes when its keys left."""

from __future__ import annotations

import concurrent.futures
import threading
from pathlib import Path
from typing import Any

import pytest

from etcd_compute import messages
from etcd_compute.compute import worker
from etcd_compute.compute.moves import InstanceMoves
from etcd_compute.compute.pool import Job
from etcd_compute.instances import migrations as move_txn
from etcd_compute.instances import records
from etcd_compute.ops import migrations as ops
from tests.unit.ops.test_migrations import world
from tests.unit.ops.test_operations import OTHER, RP

TARGET = {"address": "10.0.0.2", "instance_dir": "/srv/i", "base_sha256": None,
          "dhcp_server": None, "network": None}


class Machine:
    """What InstanceMoves uses of the instance machine; submitted jobs are recorded."""

    def __init__(self, store, placement, state_dir: Path):
        self.store, self.placement = store, placement
        self.settings = {"state_dir": str(state_dir)}
        self.stopping = threading.Event()
        self.jobs: dict[str, Job] = {}
        self.submitted: list[tuple[str, dict, dict | None]] = []
        self.rereads: list[str] = []

    def read(self, rp: str, uuid: str) -> records.RecordRead:
        return records.read_record(self.store, rp, uuid)

    def reread_later(self, spec: dict) -> None:
        self.rereads.append(spec["uuid"])

    def submit(self, kind: str, spec: dict, record_revision: int, *,
               task: dict | None = None) -> None:
        self.submitted.append((kind, spec, task))


def job(kind: str, spec: dict, task: dict | None, result: Any = None,
        error: BaseException | None = None) -> Job:
    future: concurrent.futures.Future = concurrent.futures.Future()
    if error is None:
        future.set_result(result)
    else:
        future.set_exception(error)
    return Job(kind, spec["uuid"], spec, future, task=task)


@pytest.fixture
def moving(tmp_path):
    store, placement, spec, place, _ = world()
    asked = ops.migrate(store, placement, place, spec["uuid"], live=True)
    machine = Machine(store, placement, tmp_path)
    return store, placement, spec["uuid"], asked, machine, InstanceMoves(machine)


def spec_at(store, host: str, uuid: str) -> tuple[Any, dict]:
    entry = store.get(store.keys.spec(host, uuid))
    return entry, messages.decode(messages.INSTANCE_SPEC, entry.value)


def test_the_destination_makes_room_for_a_claim_it_holds_and_answers_the_target(moving):
    store, placement, uuid, asked, machine, moves = moving
    entry, spec = spec_at(store, OTHER, uuid)
    moves.on_incoming(spec, entry.mod_revision)
    (kind, submitted, task), = machine.submitted
    assert kind == worker.PREPARE and submitted["host"] == OTHER
    moves.finish(job(kind, submitted, task, result=TARGET), None)
    assert records.read_record(store, OTHER, uuid).record["task"]["target"] == TARGET
    moves.on_incoming(spec, entry.mod_revision)  # answered: nothing more
    assert len(machine.submitted) == 1


@pytest.mark.parametrize(("held", "why"), [
    (lambda: {RP: {"resources": {"VCPU": 1}}},
     lambda: f"the instance is claimed on {RP}, not on this host"),
    (lambda: {OTHER: {"resources": {"VCPU": 1}}, RP: {"resources": {"VCPU": 1}}},
     lambda: f"the claim is split between this host (VCPU:1) and {RP}: an instance's claim "
             "is on its host alone"),
    (lambda: {OTHER: {"resources": {"VCPU": 2}}},
     lambda: "the spec asks for DISK_GB:1,MEMORY_MB:64,VCPU:1 but Placement holds VCPU:2 "
             "for it here"),
    (lambda: {}, lambda: "Placement holds no claim for this instance"),
])
def test_a_claim_not_held_here_is_answered_as_an_error_not_made_room_for(moving, held, why):
    store, placement, uuid, asked, machine, moves = moving
    placement.consumers[uuid]["allocations"] = held()
    entry, spec = spec_at(store, OTHER, uuid)
    moves.on_incoming(spec, entry.mod_revision)
    assert machine.submitted == []
    assert records.read_record(store, OTHER, uuid).record["error"] == f"refused: {why()}"
    moves.on_incoming(spec, entry.mod_revision)  # answered: not asked again
    assert machine.submitted == []


def test_a_cold_move_s_guest_is_not_defined_here_once_its_claim_left(tmp_path):
    store, placement, spec, place, _ = world()
    uuid = spec["uuid"]
    ops.migrate(store, placement, place, uuid, live=False)
    machine = Machine(store, placement, tmp_path)
    moves = InstanceMoves(machine)
    entry, there = spec_at(store, OTHER, uuid)
    there = {**there, "request": {**there["request"], "moved": {"files": []}}}
    store.put(messages.INSTANCE_SPEC, entry.key, there)
    placement.consumers[uuid]["allocations"] = {RP: {"resources": {"VCPU": 1}}}
    moves.on_incoming(there, store.get(entry.key).mod_revision)
    assert machine.submitted == []
    assert records.read_record(store, OTHER, uuid).record["error"] == (
        f"refused: the instance is claimed on {RP}, not on this host")


def test_the_source_refuses_a_move_whose_migration_does_not_hold_it_here(moving):
    store, placement, uuid, asked, machine, moves = moving
    del placement.consumers[asked.migration]
    entry, spec = spec_at(store, RP, uuid)
    moves.on_migrate(spec, entry.mod_revision)
    source = records.read_record(store, RP, uuid)
    assert source.state == "ACTIVE" and source.record["request_id"] == asked.request["id"]
    assert machine.submitted == []
    last = store.read(messages.INSTANCE_EVENTS, store.keys.events(RP, uuid))[0]["events"][-1]
    assert last["result"] == "refused" and last["error"] == (
        f"the migration {asked.migration} on this host: Placement holds no claim for this "
        "instance")


def test_the_source_does_not_move_the_guest_once_the_destination_s_claim_changed(moving):
    store, placement, uuid, asked, machine, moves = moving
    entry, spec = spec_at(store, RP, uuid)
    moves.on_migrate(spec, entry.mod_revision)
    assert records.read_record(store, RP, uuid).state == "MIGRATING"
    placement.consumers[uuid]["allocations"] = {OTHER: {"resources": {"VCPU": 2}}}
    spec = {**spec, "request": {**spec["request"], "target": TARGET}}
    store.put(messages.INSTANCE_SPEC, entry.key, spec)
    moves.on_migrate(spec, store.get(entry.key).mod_revision)
    assert machine.submitted == []
    assert records.read_record(store, RP, uuid).state == "ACTIVE"
    last = store.read(messages.INSTANCE_EVENTS, store.keys.events(RP, uuid))[0]["events"][-1]
    assert (last["action"], last["result"]) == ("migrate", "error")
    assert last["error"] == (
        f"refused: at the destination {OTHER}: the spec asks for DISK_GB:1,MEMORY_MB:64,VCPU:1 "
        "but Placement holds VCPU:2 for it here")


def test_a_move_called_off_before_the_source_took_it_up_says_so_as_after(moving):
    """The destination refused at once and the controller called the move off before the
    source took it up: the caller reads "move called off: ..." as when the source had
    taken it (which side of that race the cancel lands on is timing)."""
    store, placement, uuid, asked, machine, moves = moving
    entry, spec = spec_at(store, RP, uuid)
    spec = {**spec, "request": {**spec["request"], "cancel": "the destination: no room"}}
    store.put(messages.INSTANCE_SPEC, entry.key, spec)
    moves.on_migrate(spec, store.get(entry.key).mod_revision)
    assert machine.submitted == []
    assert records.read_record(store, RP, uuid).state == "ACTIVE"
    last = store.read(messages.INSTANCE_EVENTS, store.keys.events(RP, uuid))[0]["events"][-1]
    assert (last["action"], last["result"]) == ("migrate", "refused")
    assert last["error"] == "move called off: the destination: no room"


def test_a_move_called_off_is_discarded_and_its_keys_here_go(moving):
    store, placement, uuid, asked, machine, moves = moving
    entry, spec = spec_at(store, OTHER, uuid)
    spec = {**spec, "request": {**spec["request"], "cancel": "cancelled"}}
    store.put(messages.INSTANCE_SPEC, entry.key, spec)
    entry = store.get(entry.key)
    moves.on_incoming(spec, entry.mod_revision)
    (kind, submitted, task), = machine.submitted
    assert kind == worker.DISCARD
    moves.finish(job(kind, submitted, task, result={}), None)
    assert store.get_prefix(store.keys.host(OTHER))[0] == []


def test_the_source_takes_the_move_up_then_moves_when_the_target_comes(moving):
    store, placement, uuid, asked, machine, moves = moving
    entry, spec = spec_at(store, RP, uuid)
    moves.on_migrate(spec, entry.mod_revision)
    assert records.read_record(store, RP, uuid).state == "MIGRATING"
    assert machine.submitted == []  # no target yet
    spec = {**spec, "request": {**spec["request"], "target": TARGET}}
    store.put(messages.INSTANCE_SPEC, entry.key, spec)
    moves.on_migrate(spec, store.get(entry.key).mod_revision)
    (kind, submitted, task), = machine.submitted
    assert kind == worker.MIGRATE and task["target"] == TARGET and task["live"] is True
    figures = {"seconds": 3.5, "downtime_ms": 120, "data_total": 1 << 27, "elapsed_ms": None}
    moves.finish(job(kind, submitted, task, result={"figures": figures}), None)
    source = records.read_record(store, RP, uuid)
    assert source.state == "MIGRATED" and source.record["task"]["figures"] == figures


def test_a_failed_move_ends_where_it_started_with_the_error(moving):
    store, placement, uuid, asked, machine, moves = moving
    entry, spec = spec_at(store, RP, uuid)
    moves.on_migrate(spec, entry.mod_revision)
    task = records.read_record(store, RP, uuid).record["task"]
    moves.finish(job(worker.MIGRATE, spec, {**task, "target": TARGET}),
                 "live migration to 10.0.0.2: Lost connection; the guest runs on here")
    source = records.read_record(store, RP, uuid)
    assert source.state == "ACTIVE" and source.record["request_id"] == asked.request["id"]


def test_a_cancel_while_moving_raises_the_flag_its_driver_polls(moving, tmp_path):
    store, placement, uuid, asked, machine, moves = moving
    entry, spec = spec_at(store, RP, uuid)
    machine.jobs[uuid] = job(worker.MIGRATE, spec, {})
    cancelled = {**spec, "request": {**spec["request"], "cancel": "by alice"}}
    moves.on_migrate(cancelled, entry.mod_revision)
    flag = worker.cancel_flag(str(tmp_path), uuid)
    assert flag.exists()
    machine.jobs.clear()
    moves.on_migrate(spec, entry.mod_revision)  # taken up: the flag is cleared when it runs
    moves._clear_cancel(uuid)
    assert not flag.exists()


def test_a_move_called_off_before_it_started_is_refused_and_noted(moving):
    store, placement, uuid, asked, machine, moves = moving
    entry, spec = spec_at(store, RP, uuid)
    spec = {**spec, "request": {**spec["request"], "cancel": "by alice"}}
    store.put(messages.INSTANCE_SPEC, entry.key, spec)
    moves.on_migrate(spec, store.get(entry.key).mod_revision)
    source = records.read_record(store, RP, uuid)
    assert source.state == "ACTIVE" and source.record["request_id"] == asked.request["id"]
    assert machine.submitted == []


def test_a_cold_move_s_files_are_checked_and_defined_then_its_stopped_copy_goes(tmp_path):
    store, placement, spec, place, _ = world()
    uuid = spec["uuid"]
    ops.migrate(store, placement, place, uuid, live=False)
    machine = Machine(store, placement, tmp_path)
    moves = InstanceMoves(machine)
    entry, there = spec_at(store, OTHER, uuid)
    sent = {"files": [], "was_running": True}
    there = {**there, "request": {**there["request"], "moved": sent}}
    store.put(messages.INSTANCE_SPEC, entry.key, there)
    moves.on_incoming(there, store.get(entry.key).mod_revision)
    (kind, submitted, task), = machine.submitted
    assert kind == worker.FINISH and task["moved"] == sent
    moves.finish(job(kind, submitted, task, result={"ip": "192.168.1.3"}), None)
    arrived = records.read_record(store, OTHER, uuid).record
    assert arrived["task"]["finished"] is True and arrived["ip"] == "192.168.1.3"
    # After the hand-over its keys left the source: what is left of it there goes.
    machine.submitted.clear()
    store.delete(store.keys.spec(RP, uuid))
    store.delete(store.keys.record(RP, uuid))
    moves.on_spec_gone(RP, uuid)
    assert [kind for kind, *_ in machine.submitted] == [worker.LEAVE]
    machine.submitted.clear()
    moves.on_spec_gone(OTHER, uuid)  # its record is here: nothing to remove
    assert machine.submitted == []
    assert move_txn.read(store, uuid)[0]["state"] == "preparing"


def destroy_asked(store, uuid: str) -> None:
    """The operator's destroy during the move (ops.destroy): the source's spec asks it."""
    from etcd_compute.instances import actions as action_txn

    entry, spec = spec_at(store, RP, uuid)
    assert action_txn.request_destroy(store, entry, spec, "bob") is not None


def moving_live(store, uuid: str, moves) -> tuple[dict, dict]:
    """The source took the move up and its job (live) was submitted: (spec, task)."""
    entry, spec = spec_at(store, RP, uuid)
    moves.on_migrate(spec, entry.mod_revision)
    task = records.read_record(store, RP, uuid).record["task"]
    return spec, {**task, "target": TARGET}


def test_a_destroy_after_the_live_switch_finishes_the_move_for_the_destination_to_destroy(
        moving, tmp_path):
    """The guest runs on the destination when the job ends: the move is recorded done
    (MIGRATED) and nothing is destroyed here; the destroy is for where it landed."""
    store, placement, uuid, asked, machine, moves = moving
    spec, task = moving_live(store, uuid, moves)
    moves.cancel(uuid)
    assert worker.cancel_flag(str(tmp_path), uuid).exists()
    destroy_asked(store, uuid)
    switched = job(worker.MIGRATE, spec, task, result={"figures": {"seconds": 2.0}})
    assert moves.ended_elsewhere(switched, None) is True
    source = records.read_record(store, RP, uuid)
    assert source.state == "MIGRATED"
    assert not worker.cancel_flag(str(tmp_path), uuid).exists()
    assert moves.destroyed_where_it_lands(source) is True  # the re-read's destroy: not here
    assert machine.submitted == []


@pytest.mark.parametrize("live,error", [(True, "live migration: cancelled; the guest runs "
                                                "on here"), (False, None)])
def test_a_destroy_during_a_move_whose_guest_is_still_here_is_carried_out_here(
        moving, live, error):
    """Cancelled in time (or a cold move: its stopped copy is here until the hand-over):
    the caller destroys it here; the record is as the job left it."""
    store, placement, uuid, asked, machine, moves = moving
    spec, task = moving_live(store, uuid, moves)
    moves.cancel(uuid)
    ended = job(worker.MIGRATE, spec, {**task, "live": live},
                result=None if error else {"figures": {}, "moved": {"files": []}})
    assert moves.ended_elsewhere(ended, error) is False
    source = records.read_record(store, RP, uuid)
    assert source.state == "MIGRATING"
    assert moves.destroyed_where_it_lands(source) is False


def test_a_migrated_record_whose_move_is_gone_is_destroyed_here(moving):
    """MIGRATED but its migration gone (given up: a cold copy stranded here): this host's."""
    store, placement, uuid, asked, machine, moves = moving
    spec, task = moving_live(store, uuid, moves)
    move_txn.migrated(store, records.read_record(store, RP, uuid), {})
    store.delete(store.keys.migration(uuid))
    assert moves.destroyed_where_it_lands(records.read_record(store, RP, uuid)) is False

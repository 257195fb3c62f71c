"""The host commands (disable, enable, show, drain) against the in-memory store and Placement."""

from __future__ import annotations

import uuid as uuidlib

import pytest

from etcd_compute import messages
from etcd_compute.errors import NotFound, NoValidHost, UsageError
from etcd_compute.instances import ownership, scheduling
from etcd_compute.ops import maintenance
from etcd_compute.placement import DISABLED_TRAIT
from tests.support import make_spec
from tests.unit.fakes import FakePlacement, FakeStore


@pytest.fixture
def store() -> FakeStore:
    return FakeStore()


@pytest.fixture
def placement() -> FakePlacement:
    return FakePlacement()


def a_host(store: FakeStore, placement: FakePlacement, name: str = "node-1") -> str:
    rp = str(uuidlib.uuid4())
    placement.ensure_provider(rp, name)
    store.put(messages.ALIVE, store.keys.alive(rp), {"host": rp, "name": name, "since": 5.0})
    return rp


def an_instance(store: FakeStore, rp: str, **extra) -> dict:
    spec = make_spec(rp, **extra)
    scheduling.schedule(store, [(spec, "node-1")])
    return spec


def test_a_host_is_found_by_name_or_uuid_and_nothing_else(store, placement):
    rp = a_host(store, placement)
    assert maintenance.resolve(placement, "node-1")["uuid"] == rp
    assert maintenance.resolve(placement, rp)["name"] == "node-1"
    with pytest.raises(NotFound, match="no host 'node-2'"):
        maintenance.resolve(placement, "node-2")
    with pytest.raises(NotFound):
        maintenance.resolve(placement, str(uuidlib.uuid4()))


def test_disable_marks_the_trait_and_says_why_enable_undoes_both(store, placement):
    rp = a_host(store, placement)
    placement.set_traits(rp, {"CUSTOM_SSD"})
    maintenance.disable(store, placement, "node-1", "new disks")
    assert placement.get_traits(rp) == {"CUSTOM_SSD", DISABLED_TRAIT}
    why, _ = store.read(messages.HOST_MAINTENANCE, store.keys.maintenance(rp))
    assert why["reason"] == "new disks" and not why["draining"]
    shown = maintenance.show(store, placement, "node-1")
    assert (shown["state"], shown["disabled"]) == ("disabled", True)
    maintenance.enable(store, placement, rp)
    assert placement.get_traits(rp) == {"CUSTOM_SSD"}
    assert store.get(store.keys.maintenance(rp)) is None
    assert maintenance.show(store, placement, rp)["state"] == "up"


def test_show_lists_the_hosts_instances_and_a_host_without_heartbeat_is_down(store, placement):
    rp = a_host(store, placement)
    spec = an_instance(store, rp)
    shown = maintenance.show(store, placement, "node-1")
    assert shown["instances"] == [{"uuid": spec["uuid"], "name": "test", "state": "SCHEDULED"}]
    assert shown["up_since"] == 5.0
    store.delete(store.keys.alive(rp))
    assert maintenance.show(store, placement, "node-1")["state"] == "down"


def test_drain_needs_a_controller_and_then_touches_nothing(store, placement):
    rp = a_host(store, placement)
    an_instance(store, rp)
    with pytest.raises(UsageError, match="needs the controller"):
        maintenance.drain(store, placement, "node-1", 1, print)
    assert placement.get_traits(rp) == set()
    assert store.get(store.keys.maintenance(rp)) is None


def test_drain_asks_rebuild_instances_to_leave_and_leaves_error_ones(store, placement):
    rp = a_host(store, placement)
    store.put_raw(store.keys.leader(), "controller")
    moving = an_instance(store, rp, on_host_failure="rebuild")
    staying = an_instance(store, rp, on_host_failure="error")
    said: list[str] = []
    # Nothing moves them here (no host, no controller): the drain gives up at its timeout.
    with pytest.raises(maintenance.DrainTimeout, match="1 instance"):
        maintenance.drain(store, placement, "node-1", 0, said.append, mode="rebuild")
    actions = {uuid: spec["action"] for uuid, spec in
               store.read_prefix(messages.INSTANCE_SPEC, store.keys.specs(rp)).items()}
    assert actions == {moving["uuid"]: "evacuate", staying["uuid"]: "build"}
    assert sorted(said) == sorted([f"{staying['uuid']} left on node-1 (its on-host-failure "
                                   "is error)", f"{moving['uuid']} evacuating from node-1"])
    assert DISABLED_TRAIT in placement.get_traits(rp)


def test_drain_counts_what_already_ended_as_gone(store, placement):
    rp = a_host(store, placement)
    store.put_raw(store.keys.leader(), "controller")
    spec = an_instance(store, rp)

    def gone(line: str) -> None:
        # The instance is destroyed by someone else while the drain waits.
        ownership.remove(store, spec["uuid"], rp, None)

    assert maintenance.drain(store, placement, "node-1", 5, gone, mode="rebuild") == \
        {"moved": 0, "error": 0, "left": 0, "gone": 1}


def test_drain_leaves_an_instance_no_other_host_would_take(store, placement):
    rp = a_host(store, placement)
    store.put_raw(store.keys.leader(), "controller")
    spec = an_instance(store, rp)
    asked: list[tuple[str, frozenset]] = []

    def nowhere(spec: dict, exclude: frozenset) -> None:
        asked.append((spec["uuid"], exclude))
        raise NoValidHost(["no room"])

    said: list[str] = []
    assert maintenance.drain(store, placement, "node-1", 5, said.append, place=nowhere) == \
        {"moved": 0, "error": 0, "left": 1, "gone": 0}
    assert asked == [(spec["uuid"], frozenset({rp}))]
    assert said == [f"{spec['uuid']} left on node-1 (no other host would take it now)"]
    kept, _ = store.read(messages.INSTANCE_SPEC, store.keys.spec(rp, spec["uuid"]))
    assert kept["action"] == "build"


def test_a_live_drain_moves_running_instances_live_and_stopped_ones_cold():
    from etcd_compute.instances import migrations as move_txn
    from tests.unit.ops.test_migrations import world
    from tests.unit.ops.test_operations import RP, scheduled, set_state

    store, placement, running, place, _ = world()
    stopped = scheduled(store, placement)
    set_state(store, stopped["uuid"], "SHUTOFF")
    said: list[str] = []
    with pytest.raises(maintenance.DrainTimeout, match="2 instance"):
        maintenance.drain(store, placement, RP, 0, said.append, place=place)
    live = {uuid: migration["live"] for uuid in (running["uuid"], stopped["uuid"])
            if (migration := move_txn.read(store, uuid)[0])}
    assert live == {running["uuid"]: True, stopped["uuid"]: False}
    assert sorted(said) == sorted([f"{running['uuid']} moving live to host-b",
                                   f"{stopped['uuid']} moving cold to host-b"])
    assert DISABLED_TRAIT in placement.get_traits(RP)


def test_a_live_drain_leaves_a_paused_instance_and_a_rebuild_drain_takes_it():
    from tests.unit.ops.test_migrations import world
    from tests.unit.ops.test_operations import RP, set_state

    store, placement, spec, place, _ = world()
    set_state(store, spec["uuid"], "PAUSED")
    said: list[str] = []
    assert maintenance.drain(store, placement, RP, 5, said.append, place=place) == \
        {"moved": 0, "error": 0, "left": 1, "gone": 0}
    assert said == [f"{spec['uuid']} left on host-a (PAUSED: unpause it and drain again, or "
                    "drain --mode rebuild, which builds it again running, its memory lost)"]
    store.put_raw(store.keys.leader(), "controller")
    with pytest.raises(maintenance.DrainTimeout, match="1 instance"):
        maintenance.drain(store, placement, RP, 0, said.append, mode="rebuild")
    kept, _ = store.read(messages.INSTANCE_SPEC, store.keys.spec(RP, spec["uuid"]))
    assert kept["action"] == "evacuate"


def test_a_live_drain_leaves_what_no_other_host_would_take_and_one_at_a_time_if_asked():
    from tests.unit.ops.test_migrations import world
    from tests.unit.ops.test_operations import RP

    store, placement, spec, _place, _ = world()

    def nowhere(spec: dict, exclude: frozenset):
        raise NoValidHost(["no room"])

    said: list[str] = []
    assert maintenance.drain(store, placement, RP, 5, said.append, place=nowhere,
                             parallel=1) == {"moved": 0, "error": 0, "left": 1, "gone": 0}
    assert said == [f"{spec['uuid']} left on host-a (no other host would take it now)"]
    with pytest.raises(UsageError, match="needs the scheduler"):
        maintenance.drain(store, placement, RP, 5, said.append)
    with pytest.raises(UsageError, match="--mode 'fast'"):
        maintenance.drain(store, placement, RP, 5, said.append, mode="fast")


def test_a_drained_instance_counts_as_moved_once_its_sources_claim_is_freed():
    """The controller frees the source's claim just after its hand-over: the drain counts
    the move only then (as `migrate --wait` ends: `migrations.progress`)."""
    import threading
    import time

    from etcd_compute.instances import migrations as move_txn
    from etcd_compute.ops import migrations
    from tests.unit.ops.test_migrations import hand_over_as_the_controller_does, world
    from tests.unit.ops.test_operations import RP

    store, placement, spec, place, _ = world()
    uuid, holds = spec["uuid"], []

    def said(line: str) -> None:
        if "moving live" in line:  # the move asked: the hosts and the controller move it
            migration = move_txn.read(store, uuid)[0]
            holds.append(migration["id"])
            hand_over_as_the_controller_does(store, migrations.Asked(
                uuid, migration["source"], migration["destination"], "host-b", True,
                {"id": migration["request_id"]}, migration["id"]))
            threading.Timer(0.5, placement.delete_allocations, [migration["id"]]).start()

    started = time.monotonic()
    assert maintenance.drain(store, placement, RP, 10, said, place=place) == \
        {"moved": 1, "error": 0, "left": 0, "gone": 0}
    assert time.monotonic() - started >= 0.5
    assert placement.get_allocations(holds[0])["allocations"] == {}

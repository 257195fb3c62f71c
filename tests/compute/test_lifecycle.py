"""Stop, start, reboot, rebuild, resize and events through schedule.py and real compute
daemons (fake driver) against real etcd (TLS, RBAC) and Placement: each action with the
record, events and Placement usage checked after it; actions sent during others; hostile
specs written straight to etcd; a kill -9 in the middle of one; a stopped instance that
stays stopped through a restart, a drain and its host's death."""

from __future__ import annotations

import threading
from typing import Any

import pytest

from etcd_compute import messages
from etcd_compute.config import deep_merge
from etcd_compute.errors import EtcdComputeError
from etcd_compute.etcd import Store
from etcd_compute.instances import actions as action_txn
from etcd_compute.instances import states
from etcd_compute.ops import lifecycle
from etcd_compute.placement import PlacementClient
from etcd_compute.scheduler import RequestSpec, Scheduler
from tests.compute.guests import power_loss, timeline
from tests.compute.helpers import fake_instances, record, wait_state
from tests.compute.test_metrics import scrape, value
from tests.support import wait_for
from tools.local_services import free_port

QUERY = "resources=VCPU:1,MEMORY_MB:64,DISK_GB:1"
BIGGER = {"VCPU": 2, "MEMORY_MB": 128, "DISK_GB": 2}


def alive(store: Store, config: dict[str, Any]) -> str:
    rp = config["compute"]["uuid"]
    wait_for(lambda: store.get(store.keys.alive(rp)), 30, what=f"heartbeat of {rp}")
    return rp


def schedule(schedule_config: dict[str, Any], store: Store, count: int = 1,
             query: str = QUERY) -> list[str]:
    """Instances placed by the real scheduler, waited for until ACTIVE."""
    scheduler = Scheduler(schedule_config)
    try:
        placed = scheduler.select_destinations(RequestSpec.build(query, count=count))
    finally:
        scheduler.close()
    for destination in placed:
        wait_state(store, destination.uuid, "ACTIVE")
    return [d.uuid for d in placed]


def log_of(store: Store, uuid: str) -> list[dict[str, Any]]:
    return lifecycle.instance_events(store, uuid)


def claimed(placement: PlacementClient, uuid: str) -> dict[str, int]:
    (allocation,) = placement.get_allocations(uuid)["allocations"].values()
    return allocation["resources"]


def revisions(store: Store, rp: str, uuid: str) -> tuple[int, ...]:
    """Where nothing-was-written is checked: spec, record and events keys."""
    return tuple((store.get(key).mod_revision if store.get(key) else 0) for key in
                 (store.keys.spec(rp, uuid), store.keys.record(rp, uuid),
                  store.keys.events(rp, uuid)))


def ask(store: Store, placement: PlacementClient, uuid: str, action: str,
        **params: Any) -> lifecycle.Outcome:
    """An action as schedule.py asks it, waited for (in this process: quicker than a CLI)."""
    asked = lifecycle.request(store, placement, uuid, action, **params)
    return lifecycle.wait(store, asked, 30, lambda *_: None)


def test_each_action_through_schedule_py_with_record_events_and_usage(
        start_compute, compute_config, schedule_config, store, placement, run_schedule):
    port = free_port()
    config = deep_merge(compute_config, {"compute": {"metrics_listen": f"127.0.0.1:{port}"}})
    start_compute(config)
    rp = alive(store, config)
    (uuid,) = schedule(schedule_config, store)

    def step(*words: str, state: str, usage: dict[str, int] | None = None) -> dict:
        done = run_schedule(*words, "--wait")
        assert done.code == 0, done.stderr
        assert done.stdout.splitlines()[0] == f"{words[0].upper()} REQUESTED FOR INSTANCE {uuid}"
        now = record(store, uuid)
        assert now["state"] == state and "task" not in now
        assert placement.get_usages(rp) == (usage or {"VCPU": 1, "MEMORY_MB": 64, "DISK_GB": 1})
        last = log_of(store, uuid)[-1]
        assert (last["action"], last["result"], last["host"]) == (words[0], "success", rp)
        assert last["by"] and last["ended_at"] >= last["started_at"]
        return now

    step("stop", uuid, state="SHUTOFF")
    assert uuid not in fake_running(config)
    # Refused in its state: one line, exit 1, nothing written.
    before = revisions(store, rp, uuid)
    refused = run_schedule("reboot", uuid)
    assert refused.code == 1 and refused.stdout == ""
    assert refused.stderr == (f"schedule.py: error: instance {uuid} is SHUTOFF: reboot is not "
                              "allowed now (allowed: start, rebuild, resize, snapshot, "
                              "security-groups, attach-interface, detach-interface, migrate, "
                              "destroy)\n")
    assert revisions(store, rp, uuid) == before
    step("start", uuid, state="ACTIVE")
    step("reboot", "--hard", uuid, state="ACTIVE")
    resized = step("resize", "resources=VCPU:2,MEMORY_MB:128,DISK_GB:2", uuid, state="ACTIVE",
                   usage=BIGGER)
    assert resized["resources"] == BIGGER == claimed(placement, uuid)
    spec, _ = store.read(messages.INSTANCE_SPEC, store.keys.spec(rp, uuid))
    assert spec["resources"] == BIGGER
    assert spec["query"] == "resources=DISK_GB:2,MEMORY_MB:128,VCPU:2"
    rebuilt = step("rebuild", "--image", "file:///dev/zero", uuid, state="ACTIVE", usage=BIGGER)
    assert rebuilt["image"] == "file:///dev/zero" and rebuilt["ip"] == resized["ip"]
    shown = run_schedule("events", uuid, "--json")
    assert [e["action"] for e in shown.json()] == [
        "create", "stop", "start", "reboot", "resize", "rebuild"]
    table = run_schedule("events", uuid).stdout.splitlines()
    assert table[0].split() == ["STARTED", "ACTION", "RESULT", "BY", "HOST", "TOOK",
                                "ERROR/DETAIL"] and len(table) == 7
    samples = scrape(port)
    for action in ("stop", "start", "reboot", "resize", "rebuild"):
        assert value(samples, "etcd_compute_actions_total", action=action,
                     result="success") == 1, action
    # Destroyed: its events expire with its DELETED record.
    assert run_schedule("destroy", uuid, "--wait").code == 0
    assert log_of(store, uuid)[-1]["action"] == "destroy"
    assert store.get(store.keys.events(rp, uuid)).lease == \
        store.get(store.keys.record(rp, uuid)).lease != 0


def fake_running(config: dict[str, Any]) -> set[str]:
    from etcd_compute.drivers.fake import FakeDriver

    return FakeDriver(config).running()


def test_actions_sent_during_other_actions(start_compute, compute_config, schedule_config,
                                           store, placement):
    """The pairs, each on its own instance at once (the fake driver takes 4 s an action:
    with 1 s, a racing resize that a loaded machine delayed by over a second found the first
    one done and was rightly accepted after it):
    destroy during a rebuild and during a resize; a stop during a reboot and a resize during
    a stop (refused, nothing written); two resizes racing (one wins: claim, spec and record
    agree). Nothing leaks: no claim, fake guest or key of the destroyed ones."""
    config = deep_merge(compute_config, {"driver": {"fake": {"action_seconds": 4.0}},
                                         "compute": {"workers": 4, "inventory": {
                                             "VCPU": {"total": 8}}}})
    start_compute(config)
    rp = alive(store, config)
    rebuilt, resized, rebooted, stopped, raced = schedule(schedule_config, store, count=5)

    lifecycle.request(store, placement, rebuilt, "rebuild")
    lifecycle.request(store, placement, resized, "resize", resources=BIGGER)
    reboot = lifecycle.request(store, placement, rebooted, "reboot")
    stop = lifecycle.request(store, placement, stopped, "stop")
    for uuid, state in ((rebuilt, "REBUILDING"), (resized, "RESIZING"),
                        (rebooted, "REBOOTING"), (stopped, "STOPPING")):
        wait_state(store, uuid, state)
    for uuid, action, params in ((rebooted, "stop", {}),
                                 (stopped, "resize", {"resources": BIGGER})):
        before = revisions(store, rp, uuid)
        try:
            lifecycle.request(store, placement, uuid, action, **params)
            raise AssertionError(f"{action} during another action was not refused")
        except states.ActionRefused as exc:
            assert "is not allowed now (allowed: destroy)" in str(exc)
        assert revisions(store, rp, uuid) == before
    for uuid in (rebuilt, resized):
        from etcd_compute.ops import operations

        assert operations.destroy(store, placement, uuid) == "requested"

    outcomes: list[Any] = []

    def resize_to(vcpu: int) -> None:
        try:
            outcomes.append(lifecycle.request(store, placement, raced, "resize",
                                              resources={**BIGGER, "VCPU": vcpu}))
        except EtcdComputeError as exc:
            outcomes.append(exc)

    racers = [threading.Thread(target=resize_to, args=(vcpu,)) for vcpu in (2, 3)]
    for racer in racers:
        racer.start()
    for racer in racers:
        racer.join()
    won = [o for o in outcomes if isinstance(o, lifecycle.Requested)]
    assert len(won) == 1, outcomes

    assert lifecycle.wait(store, reboot, 30, lambda *_: None).ok
    assert lifecycle.wait(store, stop, 30, lambda *_: None).ok
    assert lifecycle.wait(store, won[0], 30, lambda *_: None).ok
    winner = won[0].request["resources"]
    assert record(store, raced)["resources"] == winner == claimed(placement, raced)
    spec, _ = store.read(messages.INSTANCE_SPEC, store.keys.spec(rp, raced))
    assert spec["resources"] == winner
    for uuid, action in ((rebuilt, "rebuild"), (resized, "resize")):
        wait_state(store, uuid, "DELETED")
        assert placement.get_allocations(uuid)["allocations"] == {}
        assert uuid not in fake_instances(config)
        cut_short, destroyed = log_of(store, uuid)[-2:]
        assert (cut_short["action"], cut_short["result"]) == (action, "error")
        assert (destroyed["action"], destroyed["result"]) == ("destroy", "success")
    assert (record(store, rebooted)["state"], record(store, stopped)["state"]) == (
        "ACTIVE", "SHUTOFF")
    # Usage is exactly what the live instances hold.
    assert placement.get_usages(rp)["VCPU"] == 1 + 1 + winner["VCPU"]


def test_a_failed_resize_keeps_the_old_size_and_claim(start_compute, compute_config,
                                                      schedule_config, store, placement,
                                                      run_schedule):
    config = deep_merge(compute_config, {"driver": {"fake": {"fail_actions": ["resize"]}}})
    start_compute(config)
    rp = alive(store, config)
    (uuid,) = schedule(schedule_config, store)
    done = run_schedule("resize", "resources=VCPU:2,MEMORY_MB:128,DISK_GB:2", uuid, "--wait")
    assert done.code == 1
    assert done.stderr.strip().endswith(
        "failed: fake hypervisor cannot resize (driver.fake.fail_actions)")
    now = record(store, uuid)
    assert (now["state"], now["resources"]) == ("ACTIVE", {"VCPU": 1, "MEMORY_MB": 64,
                                                           "DISK_GB": 1})
    assert claimed(placement, uuid) == now["resources"]
    assert placement.get_usages(rp)["VCPU"] == 1
    spec, _ = store.read(messages.INSTANCE_SPEC, store.keys.spec(rp, uuid))
    assert spec["resources"] == now["resources"]
    # And a size that does not fit is refused before anything is written or claimed.
    before = revisions(store, rp, uuid)
    no_room = run_schedule("resize", "resources=VCPU:64,MEMORY_MB:64,DISK_GB:1", uuid)
    assert no_room.code == 1 and "no room for it on its host" in no_room.stderr
    assert len(no_room.stderr.splitlines()) == 1
    assert revisions(store, rp, uuid) == before and claimed(placement, uuid)["VCPU"] == 1


def test_hostile_requests_written_straight_to_etcd_are_refused_by_the_host(
        start_compute, compute_config, schedule_config, store, placement):
    """An operator's key can write any spec; the host still trusts only Placement and the
    state table: a resize nobody claimed, a reboot of a stopped instance."""
    start_compute(compute_config)
    rp = alive(store, compute_config)
    grown, stopped = schedule(schedule_config, store, count=2)
    assert ask(store, placement, stopped, "stop").ok
    for uuid, action, request in (
            (grown, "resize", {"resources": {"VCPU": 4, "MEMORY_MB": 2048, "DISK_GB": 20},
                               "allocations": {rp: {"resources": {
                                   "VCPU": 4, "MEMORY_MB": 2048, "DISK_GB": 20}}}}),
            (stopped, "reboot", {})):
        spec, _ = store.read(messages.INSTANCE_SPEC, store.keys.spec(rp, uuid))
        hostile = {**spec, "action": action,
                   "request": action_txn.new_request("mallory", **request)}
        store.put(messages.INSTANCE_SPEC, store.keys.spec(rp, uuid), hostile)
        wait_for(lambda u=uuid, r=hostile: record(store, u).get("request_id") ==
                 r["request"]["id"], 20, what=f"the host to refuse the {action}")
        last = log_of(store, uuid)[-1]
        assert (last["action"], last["result"], last["by"]) == (action, "refused", "mallory")
    assert "Placement holds DISK_GB:1,MEMORY_MB:64,VCPU:1" in log_of(store, grown)[-1]["error"]
    assert record(store, grown)["resources"] == claimed(placement, grown) == {
        "VCPU": 1, "MEMORY_MB": 64, "DISK_GB": 1}
    assert "is SHUTOFF: reboot is not allowed" in log_of(store, stopped)[-1]["error"]
    assert stopped not in fake_running(compute_config)


def test_a_kill9_during_an_action_is_resumed_and_a_stopped_instance_stays_stopped(
        start_compute, compute_config, schedule_config, store, placement):
    config = deep_merge(compute_config, {"driver": {"fake": {"action_seconds": 2.0}}})
    compute = start_compute(config)
    alive(store, config)
    stopped, stopping = schedule(schedule_config, store, count=2)
    assert ask(store, placement, stopped, "stop").ok
    asked = lifecycle.request(store, placement, stopping, "stop")
    wait_state(store, stopping, "STOPPING")
    compute.kill9()
    start_compute(config, name="compute-again")
    assert lifecycle.wait(store, asked, 30, lambda *_: None).ok
    assert record(store, stopping)["state"] == record(store, stopped)["state"] == "SHUTOFF"
    # The restart's reconcile powered on nothing: no guest ran again after it stopped.
    runs = [(uuid, event) for _at, uuid, event, _host in timeline([config])]
    assert runs.count((stopped, "run")) == 1 and runs.count((stopping, "run")) == 1
    assert [e["result"] for e in log_of(store, stopping)] == ["success", "success"]


def two_hosts_and_an_instance(start_compute, start_controller, compute_config, host_config,
                              schedule_config, store
                              ) -> tuple[str, tuple[dict, dict], dict[str, Any]]:
    """host-a and host-b up with a quick controller, and one instance placed: its uuid,
    (its host's config, the other's), the computes by provider."""
    from tests.compute.test_host_failure import fast_controller, rp_of

    a, b = compute_config, host_config("host-b")
    start_controller(fast_controller(schedule_config))
    computes = {rp_of(a): start_compute(a, name="host-a"),
                rp_of(b): start_compute(b, name="host-b")}
    for config in (a, b):
        alive(store, config)
    wait_for(lambda: store.get(store.keys.leader()), 20, what="a controller to lead")
    uuid = schedule(schedule_config, store, query=QUERY)[0]
    return uuid, ((a, b) if record(store, uuid)["host"] == rp_of(a) else (b, a)), computes


@pytest.mark.parametrize("action", ["stop", "suspend"])
def test_a_stopped_instance_is_moved_stopped_by_a_drain_and_by_its_hosts_death(
        start_compute, start_controller, compute_config, host_config, schedule_config,
        store, placement, run_schedule, action):
    """A suspended one too: its memory stays with the host, so it is built again off."""
    from tests.compute.test_host_failure import rp_of

    uuid, (first, second), computes = two_hosts_and_an_instance(
        start_compute, start_controller, compute_config, host_config, schedule_config, store)
    assert ask(store, placement, uuid, action).ok
    if action == "suspend":
        assert record(store, uuid)["state"] == "SUSPENDED"
        # A live drain (the default) moves no suspended instance: left, said why.
        left = run_schedule("host", "drain", first["compute"]["name"])
        assert "left on" in left.stdout + left.stderr and "SUSPENDED: resume it" in \
            left.stdout + left.stderr, (left.stdout, left.stderr)
        assert record(store, uuid)["state"] == "SUSPENDED"
        assert run_schedule("host", "enable", first["compute"]["name"]).code == 0
    # Rebuilt elsewhere (a drain moves it cold by default: tests/compute/test_migration.py).
    drained = run_schedule("host", "drain", first["compute"]["name"], "--mode", "rebuild")
    assert drained.code == 0, drained.stderr
    moved = wait_state(store, uuid, "SHUTOFF")
    assert moved["host"] == rp_of(second)
    # Its host dies: the controller builds it on the other one (enabled again), still off.
    assert run_schedule("host", "enable", first["compute"]["name"]).code == 0
    computes[rp_of(second)].kill9()
    power_loss(second)
    wait_for(lambda: (record(store, uuid) or {}).get("host") == rp_of(first), 30,
             what="the instance rebuilt on the first host")
    assert wait_state(store, uuid, "SHUTOFF")["host"] == rp_of(first)
    ran = [(u, e, h) for _at, u, e, h in timeline([first, second]) if u == uuid and e == "run"]
    assert ran == [(uuid, "run", rp_of(first))]  # only its first build ever ran
    assert [e["action"] for e in log_of(store, uuid)] == [
        "create", action, "evacuate", "reschedule", "build", "recover", "build"]
    assert claimed(placement, uuid) == {"VCPU": 1, "MEMORY_MB": 64, "DISK_GB": 1}


def test_a_paused_instance_is_left_by_a_live_drain_and_built_again_running_elsewhere(
        start_compute, start_controller, compute_config, host_config, schedule_config,
        store, placement, run_schedule):
    """Its memory is in its host's RAM: a live drain leaves it (ours moves no paused guest)
    and says why; a rebuild drain, and its host's death, build it again elsewhere running,
    as Nova's evacuate of a paused server ends ACTIVE."""
    from tests.compute.test_host_failure import rp_of

    uuid, (first, second), computes = two_hosts_and_an_instance(
        start_compute, start_controller, compute_config, host_config, schedule_config, store)
    assert ask(store, placement, uuid, "pause").ok
    assert record(store, uuid)["state"] == "PAUSED"
    assert uuid in fake_running(first)  # frozen, not off
    left = run_schedule("host", "drain", first["compute"]["name"])
    said = left.stdout + left.stderr
    assert "left on" in said and "PAUSED: unpause it" in said, said
    assert record(store, uuid)["state"] == "PAUSED"
    assert run_schedule("host", "enable", first["compute"]["name"]).code == 0
    drained = run_schedule("host", "drain", first["compute"]["name"], "--mode", "rebuild")
    assert drained.code == 0, drained.stderr
    moved = wait_state(store, uuid, "ACTIVE")
    assert moved["host"] == rp_of(second) and uuid in fake_running(second)
    # Paused there, then its host dies: the controller builds it on the first one, running.
    assert ask(store, placement, uuid, "pause").ok
    assert run_schedule("host", "enable", first["compute"]["name"]).code == 0
    computes[rp_of(second)].kill9()
    power_loss(second)
    wait_for(lambda: (record(store, uuid) or {}).get("host") == rp_of(first), 30,
             what="the instance rebuilt on the first host")
    assert wait_state(store, uuid, "ACTIVE")["host"] == rp_of(first)
    assert uuid in fake_running(first)
    assert [e["action"] for e in log_of(store, uuid)] == [
        "create", "pause", "evacuate", "reschedule", "build", "pause", "recover", "build"]
    assert claimed(placement, uuid) == {"VCPU": 1, "MEMORY_MB": 64, "DISK_GB": 1}


def test_a_resize_undo_takes_back_only_its_own_claim_in_real_placement(placement):
    """What two racing resizes rely on, against Placement itself: a write bumps the
    consumer generation by one, so an undo at "ours + 1" fails once someone wrote after."""
    from etcd_compute import claims
    from tests.scheduler.conftest import add_host

    rp = add_host(placement, None, "resize-host")
    uuid = "0b7e4f1e-9a0c-4a51-8f0e-5d2c3b4a6e7f"
    placement.claim(uuid, {rp: {"resources": {"VCPU": 1}}}, "p", "u")
    mine, generation = claims.resize(placement, uuid, rp, {"VCPU": 2})
    claims.resize(placement, uuid, rp, {"VCPU": 3})  # a second resize lands after ours
    assert claims.undo(placement, uuid, mine, generation) is False
    assert claimed(placement, uuid) == {"VCPU": 3}
    mine, generation = claims.resize(placement, uuid, rp, {"VCPU": 4})
    assert claims.undo(placement, uuid, mine, generation) is True
    assert claimed(placement, uuid) == {"VCPU": 3}
    placement.delete_allocations(uuid)

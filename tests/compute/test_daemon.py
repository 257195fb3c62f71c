"""The compute daemon against real etcd and Placement (fake driver).

Each test runs compute.py as a real process, so kill -9 and restarts are real.
"""

from __future__ import annotations

import json
import os
import random
import re
import signal
import threading
import time
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from etcd_compute import messages
from etcd_compute.config import deep_merge
from etcd_compute.etcd import Store
from etcd_compute.placement import DISABLED_TRAIT, PlacementClient
from etcd_compute.shards import aggregate_of
from tests.compute.helpers import (
    assert_nothing_left,
    build_events,
    builds_log,
    claim_and_send,
    fake_instances,
    make_spec,
    record,
    record_entry,
    record_history,
    send_destroy,
    wait_state,
    worker_pids,
)
from tests.support import REPO, wait_for


def rp_of(config: dict[str, Any]) -> str:
    return config["compute"]["uuid"]


def wait_alive(store: Store, rp_uuid: str, timeout: float = 30) -> None:
    wait_for(lambda: store.get(store.keys.alive(rp_uuid)), timeout, what="heartbeat key")


def test_build_and_destroy_leave_nothing(start_compute, compute_config, store, placement):
    compute = start_compute(compute_config)
    wait_alive(store, rp_of(compute_config))
    spec = make_spec(rp_of(compute_config))
    claim_and_send(store, placement, spec)
    active = wait_state(store, spec["uuid"], "ACTIVE")
    assert active["ip"] and active["host"] == rp_of(compute_config)
    booted = store.get(store.keys.booted(rp_of(compute_config), spec["uuid"]))
    assert booted.value.decode() == active["ip"]
    assert placement.get_usages(rp_of(compute_config))["VCPU"] == 1

    send_destroy(store, spec)
    deleted = wait_state(store, spec["uuid"], "DELETED")
    assert deleted["ip"] is None
    assert_nothing_left(store, placement, compute_config, spec)
    assert placement.get_usages(rp_of(compute_config))["VCPU"] == 0
    # The DELETED record expires on its own: it is bound to a lease.
    assert record_entry(store, spec["uuid"]).lease != 0
    assert "INSTANTIATE INSTANCE " + spec["uuid"] in compute.log()


def test_restarts_reuse_provider_and_sigterm_disables(start_compute, compute_config, store,
                                                      placement):
    # No uuid in the config: the identity is generated once and kept in state_dir.
    config = deep_merge(compute_config, {"compute": {"uuid": None}})
    seen = set()
    for _ in range(5):
        compute = start_compute(config)
        wait_for(lambda: placement.list_providers(), 30, what="provider registration")
        providers = placement.list_providers()
        wait_alive(store, providers[0]["uuid"])
        assert DISABLED_TRAIT not in placement.get_traits(providers[0]["uuid"])
        seen.update(p["uuid"] for p in providers)
        assert compute.terminate() == 0
        # A clean stop makes the host unschedulable and drops its heartbeat at once.
        assert DISABLED_TRAIT in placement.get_traits(providers[0]["uuid"])
        assert store.get(store.keys.alive(providers[0]["uuid"])) is None
    assert len(seen) == 1 and len(placement.list_providers()) == 1


def test_heartbeat_disappears_within_ttl_after_kill9(start_compute, compute_config, store):
    compute = start_compute(compute_config)
    rp = rp_of(compute_config)
    wait_alive(store, rp)
    killed_at = time.monotonic()
    compute.kill9()
    wait_for(lambda: store.get(store.keys.alive(rp)) is None,
             compute_config["compute"]["heartbeat_ttl"] + 2, what="heartbeat to expire")
    assert time.monotonic() - killed_at <= compute_config["compute"]["heartbeat_ttl"] + 1.5


def test_200_requests_through_kill9_restarts_exactly_once(start_compute, compute_config,
                                                         store, placement):
    room = {"VCPU": {"total": 256}, "MEMORY_MB": {"total": 16384}, "DISK_GB": {"total": 256}}
    config = deep_merge(compute_config, {"driver": {"fake": {"build_seconds": 0.02}},
                                         "compute": {"workers": 2, "inventory": room}})
    rp = rp_of(config)
    specs = [make_spec(rp) for _ in range(200)]
    rng = random.Random(os.environ.get("TEST_SEED", "compute"))

    def writer(batch: list[dict[str, Any]]) -> None:
        for spec in batch:
            claim_and_send(store, placement, spec)
            time.sleep(rng.uniform(0, 0.02))

    def builds_started() -> int:
        return sum(e.event == "start" for e in build_events(config))

    # Five batches of 40. Each daemon run is killed at work (a moment after it started a
    # build), while its batch is still being written: specs arrive while it is dead, and
    # the next run starts while they do (a kill timed by the clock alone mostly hit runs
    # still starting, that had done nothing yet).
    compute = start_compute(config)
    wait_alive(store, rp)
    kills = kills_while_sending = 0
    for batch in (specs[n:n + 40] for n in range(0, len(specs), 40)):
        thread = threading.Thread(target=writer, args=(batch,))
        before = builds_started()
        thread.start()
        wait_for(lambda before=before: builds_started() > before, 60,
                 what="the daemon to start a build")
        time.sleep(rng.uniform(0, 0.3))
        kills_while_sending += thread.is_alive()
        compute.kill9()
        kills += 1
        compute = start_compute(config)
        thread.join()
    active_at = {spec["uuid"]: wait_state(store, spec["uuid"], "ACTIVE", timeout=60)["updated_at"]
                 for spec in specs}
    events = build_events(config)
    built = Counter(e.uuid for e in events if e.event == "built")
    assert set(built) == {s["uuid"] for s in specs} == fake_instances(config)
    assert max(built.values()) == 1, "an instance was built twice"
    # Every build *attempt* is logged: at most one per instance per daemon run (a restart
    # may resume an interrupted build), and none once the instance was recorded ACTIVE.
    attempts = Counter((e.uuid, e.daemon) for e in events if e.event == "start")
    assert max(attempts.values()) == 1, "one daemon run started a build twice"
    late = [e for e in events if e.event == "start" and e.at > active_at[e.uuid]]
    assert not late, f"{len(late)} build(s) asked for after the instance was ACTIVE"
    for spec in specs:
        # created BUILDING, then ACTIVE: no re-delivered event moved it again.
        _, meta = store.client.get(store.keys.record(rp, spec["uuid"]))
        assert meta.version == 2, f"record of {spec['uuid']} written {meta.version} times"
    # The kills landed in the middle of the work, or the checks above hold trivially: specs
    # kept arriving across them, builds were done by several daemon runs, and builds a kill
    # cut were started again by the next run (and done once).
    runs_that_built = {e.daemon for e in events if e.event == "built"}
    started_by: dict[str, set[int]] = {}
    for e in events:
        if e.event == "start":
            started_by.setdefault(e.uuid, set()).add(e.daemon)
    resumed = [uuid for uuid, runs in started_by.items() if len(runs) > 1]
    print(f"kills {kills} ({kills_while_sending} while sending), {len(runs_that_built)} "
          f"daemon runs built, {len(resumed)} builds resumed after a kill")
    assert kills_while_sending >= 3, kills_while_sending
    assert len(runs_that_built) >= 3, runs_that_built
    assert resumed, "no kill cut a build"


def test_etcd_restart_mid_stream_loses_nothing(tmp_path, start_compute, compute_config,
                                               placement):
    from tools.local_services import EtcdServer

    # Plain TCP, no auth: this test is also the proof that the plain mode still works.
    etcd = EtcdServer.create(tmp_path / "own-etcd").start()
    try:
        etcd_config = {"endpoints": [etcd.endpoint], "prefix": "/restart", "timeout": 5.0,
                       "ca_cert": None, "cert": None, "key": None}
        room = {"VCPU": {"total": 64}, "MEMORY_MB": {"total": 8192}, "DISK_GB": {"total": 64}}
        config = deep_merge(compute_config, {"etcd": etcd_config,
                                             "compute": {"inventory": room}})
        rp = rp_of(config)
        store = Store(etcd_config)
        start_compute(config)
        wait_alive(store, rp)
        specs = [make_spec(rp) for _ in range(60)]
        for spec in specs[:30]:
            claim_and_send(store, placement, spec)
        etcd.stop()
        time.sleep(2)
        etcd.start()
        # A fresh client: the point is the daemon's recovery, not this one's.
        store = Store(etcd_config)
        for spec in specs[30:]:
            claim_and_send(store, placement, spec)
        for spec in specs:
            wait_state(store, spec["uuid"], "ACTIVE", timeout=60)
        assert sorted(builds_log(config)) == sorted(s["uuid"] for s in specs)
        wait_alive(store, rp)  # the heartbeat came back too
    finally:
        etcd.stop()


def test_destroy_during_build_ends_deleted_with_nothing_left(start_compute, compute_config,
                                                            store, placement):
    config = deep_merge(compute_config, {"driver": {"fake": {"build_seconds": 3}}})
    start_compute(config)
    wait_alive(store, rp_of(config))
    spec = make_spec(rp_of(config))
    claim_and_send(store, placement, spec)
    wait_state(store, spec["uuid"], "BUILDING")
    marker = Path(config["compute"]["state_dir"]) / "fake-instances" / f".{spec['uuid']}.building"
    wait_for(marker.exists, 10, what="the worker to start building")
    started = time.monotonic()
    send_destroy(store, spec)
    wait_state(store, spec["uuid"], "DELETED", timeout=20)
    assert_nothing_left(store, placement, config, spec)
    # and it does not come back once the cancelled build's 3 s would have run out
    time.sleep(max(0.0, started + 4 - time.monotonic()))
    assert spec["uuid"] not in fake_instances(config)
    assert [e.event for e in build_events(config) if e.uuid == spec["uuid"]] == ["start"]


def test_build_failure_is_error_with_reason_and_frees_everything(start_compute,
                                                                compute_config, store,
                                                                placement):
    config = deep_merge(compute_config, {"driver": {"fake": {"fail_builds": True}}})
    start_compute(config)
    wait_alive(store, rp_of(config))
    spec = make_spec(rp_of(config))
    claim_and_send(store, placement, spec)
    failed = wait_state(store, spec["uuid"], "ERROR")
    assert failed["error"] == "fake hypervisor is broken (driver.fake.fail_builds)"
    assert_nothing_left(store, placement, config, spec)
    stats = store.read(messages.HOST_STATS, store.keys.stats(rp_of(config)))[0]
    assert len(stats["build_failures"]) == 1  # the host's fault: it counts against it


def build_failures(store: Store, rp: str) -> list[float]:
    """The build failures held against `rp` (its stats also hold its capacity account)."""
    stats, _ = store.read(messages.HOST_STATS, store.keys.stats(rp))
    return (stats or {}).get("build_failures", [])


def test_a_bad_image_is_the_requests_fault_not_the_hosts(start_compute, start_controller,
                                                         compute_config, host_config, store,
                                                         placement):
    start_controller()
    start_compute(compute_config)
    other = host_config("spare-host")
    start_compute(other, name="spare")
    a, b = rp_of(compute_config), rp_of(other)
    wait_alive(store, a)
    wait_alive(store, b)
    wait_for(lambda: store.get(store.keys.leader()), 20, what="a controller to lead")
    spec = make_spec(a, image="file:///nonexistent/image.qcow2")
    spec["alternates"] = [{"host": b, "allocations": {b: {"resources": spec["resources"]}}}]
    claim_and_send(store, placement, spec)
    failed = wait_state(store, spec["uuid"], "ERROR")
    # ERROR at once, on the host it was sent to: not handed to an alternate, not blamed.
    assert "not found" in failed["error"] and failed["host"] == a
    assert_nothing_left(store, placement, compute_config, spec)
    assert not build_failures(store, a)


@pytest.mark.parametrize(
    ("mutate", "reason"),
    [
        (lambda s: "{not json", "not valid JSON"),
        (lambda s: {**s, "resources": {"VCPU": -1}}, "resources.VCPU"),
        (lambda s: {k: v for k, v in s.items() if k != "resources"}, "'resources' is a required"),
        (lambda s: {**s, "colour": "blue"}, "colour"),
        (lambda s: {**s, "image": {"url": "ftp://example.org/x.img"}}, "image.url"),
    ],
    ids=["malformed-json", "negative-resources", "missing-resources", "unknown-field",
         "bad-image-scheme"],
)
def test_bad_spec_is_error_and_daemon_keeps_going(start_compute, compute_config, store,
                                                 placement, mutate, reason):
    compute = start_compute(compute_config)
    rp = rp_of(compute_config)
    wait_alive(store, rp)
    spec = make_spec(rp)
    placement.claim(spec["uuid"], spec["allocations"], "p", "u")
    bad = mutate(spec)
    raw = bad if isinstance(bad, str) else __import__("json").dumps(bad)
    store.client.put(store.keys.spec(rp, spec["uuid"]), raw)
    failed = wait_state(store, spec["uuid"], "ERROR")
    assert reason in failed["error"]
    assert_nothing_left(store, placement, compute_config, spec)
    good = make_spec(rp)
    claim_and_send(store, placement, good)
    wait_state(store, good["uuid"], "ACTIVE")
    assert compute.alive()


def test_garbage_over_an_active_instance_tears_it_down(start_compute, compute_config, store,
                                                      placement):
    compute = start_compute(compute_config)
    rp = rp_of(compute_config)
    wait_alive(store, rp)
    spec = make_spec(rp)
    claim_and_send(store, placement, spec)
    wait_state(store, spec["uuid"], "ACTIVE")
    store.client.put(store.keys.spec(rp, spec["uuid"]), "{garbage")
    failed = wait_state(store, spec["uuid"], "ERROR")
    assert "not valid JSON" in failed["error"]
    assert_nothing_left(store, placement, compute_config, spec)
    # The request was at fault, not the host: no build failure is held against it.
    assert not build_failures(store, rp)
    assert compute.alive()


def test_hung_build_times_out_into_error(start_compute, compute_config, store, placement):
    config = deep_merge(compute_config, {"driver": {"fake": {"build_seconds": 30}},
                                         "compute": {"job_timeout_seconds": 1}})
    start_compute(config)
    wait_alive(store, rp_of(config))
    spec = make_spec(rp_of(config))
    claim_and_send(store, placement, spec)
    failed = wait_state(store, spec["uuid"], "ERROR", timeout=20)
    assert "timed out after 1 s" in failed["error"]
    assert_nothing_left(store, placement, config, spec)


def test_crashed_worker_is_error_with_reason(start_compute, compute_config, store, placement):
    config = deep_merge(compute_config, {"driver": {"fake": {"build_seconds": 30}}})
    compute = start_compute(config)
    wait_alive(store, rp_of(config))
    spec = make_spec(rp_of(config))
    claim_and_send(store, placement, spec)
    wait_state(store, spec["uuid"], "BUILDING")
    marker = Path(config["compute"]["state_dir"]) / "fake-instances" / f".{spec['uuid']}.building"
    building_pid = int(wait_for(lambda: marker.exists() and marker.read_text(), 10,
                                what="the worker to start building"))
    assert building_pid in worker_pids(compute.pid)
    os.kill(building_pid, signal.SIGKILL)
    failed = wait_state(store, spec["uuid"], "ERROR", timeout=20)
    assert "worker died" in failed["error"]
    assert_nothing_left(store, placement, config, spec)
    assert compute.alive()


def test_pool_survives_all_workers_killed(start_compute, compute_config, store, placement):
    """Even idle workers dying (OOM killer) must not wedge the daemon."""
    compute = start_compute(compute_config)
    wait_alive(store, rp_of(compute_config))
    first = make_spec(rp_of(compute_config))
    claim_and_send(store, placement, first)
    wait_state(store, first["uuid"], "ACTIVE")
    workers = worker_pids(compute.pid)
    assert len(workers) == compute_config["compute"]["workers"], workers
    for pid in workers:
        os.kill(pid, signal.SIGKILL)
    second = make_spec(rp_of(compute_config))
    claim_and_send(store, placement, second)
    wait_state(store, second["uuid"], "ACTIVE", timeout=30)


def test_reconcile_builds_requests_sent_while_down(start_compute, compute_config, store,
                                                   placement):
    rp = rp_of(compute_config)
    first = start_compute(compute_config)
    wait_alive(store, rp)
    assert first.terminate() == 0
    pending = [make_spec(rp) for _ in range(3)]
    for spec in pending:
        claim_and_send(store, placement, spec)
    compute = start_compute(compute_config)
    for spec in pending:
        wait_state(store, spec["uuid"], "ACTIVE")
    assert "reconciled 3 spec(s)" in compute.log()


def test_orphan_guests_are_destroyed_at_start(start_compute, compute_config, store):
    from pathlib import Path

    root = Path(compute_config["compute"]["state_dir"]) / "fake-instances"
    root.mkdir(parents=True)
    orphan = "11111111-2222-4333-8444-555555555555"
    (root / f"{orphan}.json").write_text(json.dumps({"uuid": orphan, "result": {}}))
    compute = start_compute(compute_config)
    wait_alive(store, rp_of(compute_config))
    wait_for(lambda: f"orphan: the driver holds instance {orphan}" in compute.log(), 10,
             what="orphan report")
    # No spec of ours asks for it: it was moved or deleted while this host was away.
    wait_for(lambda: orphan not in fake_instances(compute_config), 10, what="orphan destroyed")


def documented_actions() -> dict[str, tuple[str, str | None]]:
    """The table of the operator's actions (docs/reference/instance-states.md): {action: (the
    state it passes through, the state it ends in; None for "as it started")}."""
    lines = iter((REPO / "docs" / "reference" / "instance-states.md").read_text().splitlines())
    header = ["action", "allowed in", "passes through", "ends", "a failure ends"]
    for line in lines:
        if [cell.strip() for cell in line.strip("|").split("|")] == header:
            break
    next(lines)  # |---|---|
    documented = {}
    for line in lines:
        if not line.startswith("|"):
            break
        action, _, passes, ends, _ = (cell.strip() for cell in line.strip("|").split("|"))
        # One row may name several actions: `attach-interface`, `detach-interface` (...).
        for name in [n.split()[0] for n in re.findall(r"`([^`]+)`", action.split("(")[0])] \
                or [action.split()[0]]:
            documented[name] = (
                passes, None if ends.startswith("as it started") else re.split(r"[ ,(]", ends)[0])
    return documented


def test_record_states_follow_the_documented_machine(start_compute, compute_config, store,
                                                    placement, run_schedule, schedule_config,
                                                    glance_config, glance_images, write_yaml):
    """Every state a record was written with (etcd's history of its key, not polling),
    against docs/reference/instance-states.md: a build, a failed build, and each operator's
    action as its table says (a snapshot goes into the session's real Glance)."""
    config = deep_merge(compute_config, {"driver": {"fake": {"build_seconds": 0.5}},
                                         "glance": glance_config})
    start_compute(config)
    rp = rp_of(config)
    wait_alive(store, rp)
    schedule_yaml = write_yaml("schedule-glance.yaml",
                               deep_merge(schedule_config, {"glance": glance_config}))

    def revision() -> int:
        return store.get_prefix(store.keys.hosts(), keys_only=True)[1]

    start = revision()
    spec = make_spec(rp)
    claim_and_send(store, placement, spec)
    wait_state(store, spec["uuid"], "ACTIVE")
    send_destroy(store, spec)
    wait_state(store, spec["uuid"], "DELETED")
    assert record_history(store, rp, spec["uuid"], start + 1) == [
        "BUILDING", "ACTIVE", "DELETING", "DELETED"]

    failing = make_spec(rp, image="file:///nonexistent/image.qcow2")
    claim_and_send(store, placement, failing)
    wait_state(store, failing["uuid"], "ERROR")
    assert record_history(store, rp, failing["uuid"], start + 1) == ["BUILDING", "ERROR"]

    # Placed by schedule.py (SCHEDULED first), then each action of the actions table in turn,
    # from each state it is allowed in.
    start = revision()
    placed = run_schedule("resources=VCPU:1,MEMORY_MB:64,DISK_GB:1", "--wait", "--json",
                          config=schedule_yaml)
    assert placed.code == 0, placed.stderr
    uuid = placed.json()["instances"][0]["uuid"]
    assert record_history(store, rp, uuid, start + 1) == ["SCHEDULED", "BUILDING", "ACTIVE"]
    documented = documented_actions()
    # A move needs a second host: tests/compute/test_migration.py follows its row. An
    # interface is plugged through the compute API only, on Neutron:
    # tests/network/test_interface_hotplug_vm.py follows its row.
    del documented["migrate"], documented["attach-interface"], documented["detach-interface"]
    images = [f"record-states-{uuid[:8]}-{n}" for n in range(3)]
    sequence = [["stop", uuid], ["start", uuid], ["suspend", uuid], ["snapshot", uuid, images[2]],
                ["resume", uuid], ["pause", uuid], ["reboot", uuid], ["pause", uuid],
                ["unpause", uuid], ["reboot", uuid], ["security-groups", "none", uuid],
                ["rebuild", uuid],
                ["resize", "resources=VCPU:2,MEMORY_MB:128,DISK_GB:2", uuid],
                ["snapshot", uuid, images[0]], ["stop", uuid],
                ["security-groups", "default", uuid], ["rebuild", uuid],
                ["resize", "resources=VCPU:3,MEMORY_MB:192,DISK_GB:3", uuid],
                ["snapshot", uuid, images[1]], ["start", uuid], ["destroy", uuid]]
    assert {words[0] for words in sequence} == set(documented), sorted(documented)
    state = "ACTIVE"
    try:
        for action, *arguments in sequence:
            start = revision()
            done = run_schedule(action, *arguments, "--wait", config=schedule_yaml,
                                timeout=120)
            assert done.code == 0, (action, done.stderr)
            passes, ends = documented[action]
            seen = record_history(store, rp, uuid, start + 1)
            assert seen == [passes, ends or state], f"{action} from {state}: {seen}"
            state = seen[-1]
    finally:
        for name in images:
            for image in glance_images.client.list(name=name):
                glance_images.client.delete(image["id"])
    assert state == "DELETED"


def test_inventory_and_traits_registered(start_compute, compute_config, store,
                                         placement: PlacementClient):
    config = deep_merge(compute_config, {"compute": {
        "traits": ["CUSTOM_GPU_FREE"],
        "aggregates": ["6f9a2b4e-1c3d-4e5f-8a7b-9c0d1e2f3a4b"],
    }})
    start_compute(config)
    rp = rp_of(config)
    wait_alive(store, rp)
    inventory = placement.get_inventories(rp)
    assert inventory["VCPU"]["total"] == 4
    assert inventory["MEMORY_MB"]["total"] == 2048
    traits = placement.get_traits(rp)
    assert "CUSTOM_GPU_FREE" in traits
    assert any(t.startswith("HW_CPU_X86_") for t in traits)
    aggregates = placement.get(f"/resource_providers/{rp}/aggregates")["aggregates"]
    assert sorted(aggregates) == sorted(["6f9a2b4e-1c3d-4e5f-8a7b-9c0d1e2f3a4b", aggregate_of(rp)])


def test_failed_build_is_rescheduled_to_an_alternate(start_compute, start_controller,
                                                     compute_config, host_config, store,
                                                     placement):
    broken = deep_merge(compute_config, {"driver": {"fake": {"fail_builds": True}}})
    healthy = host_config("healthy-host")
    start_controller()
    start_compute(broken, name="broken")
    start_compute(healthy, name="healthy")
    a, b = rp_of(broken), rp_of(healthy)
    wait_alive(store, a)
    wait_alive(store, b)
    wait_for(lambda: store.get(store.keys.leader()), 20, what="a controller to lead")
    spec = make_spec(a)
    spec["alternates"] = [{"host": b, "allocations": {b: {"resources": spec["resources"]}}}]
    claim_and_send(store, placement, spec)
    active = wait_state(store, spec["uuid"], "ACTIVE")
    assert active["host"] == b
    # The claim moved with the instance; the broken host is blamed in its stats.
    assert set(placement.get_allocations(spec["uuid"])["allocations"]) == {b}
    assert placement.get_usages(a)["VCPU"] == 0 and placement.get_usages(b)["VCPU"] == 1
    assert store.get(store.keys.spec(a, spec["uuid"])) is None
    assert store.get(store.keys.record(a, spec["uuid"])) is None
    assert store.get(store.keys.spec(b, spec["uuid"])) is not None
    assert len(store.read(messages.HOST_STATS, store.keys.stats(a))[0]["build_failures"]) == 1


def test_no_alternate_that_takes_it_ends_in_error_through_the_controller(
        start_compute, start_controller, compute_config, store, placement):
    import uuid as uuidlib

    broken = deep_merge(compute_config, {"driver": {"fake": {"fail_builds": True}}})
    start_controller()
    start_compute(broken)
    a = rp_of(broken)
    wait_alive(store, a)
    wait_for(lambda: store.get(store.keys.leader()), 20, what="a controller to lead")
    dead = str(uuidlib.uuid4())  # an alternate whose compute is not running
    placement.ensure_provider(dead, "dead-host")
    spec = make_spec(a)
    spec["alternates"] = [{"host": dead, "allocations": {dead: {"resources": spec["resources"]}}}]
    claim_and_send(store, placement, spec)
    failed = wait_state(store, spec["uuid"], "ERROR")
    assert failed["error"] == ("fake hypervisor is broken (driver.fake.fail_builds); "
                               "no alternate host would take it")
    assert_nothing_left(store, placement, broken, spec)


def test_failed_build_without_live_alternates_ends_in_error(start_compute, compute_config,
                                                            store, placement):
    import uuid as uuidlib

    broken = deep_merge(compute_config, {"driver": {"fake": {"fail_builds": True}}})
    start_compute(broken)
    a = rp_of(broken)
    wait_alive(store, a)
    dead = str(uuidlib.uuid4())  # an alternate whose compute is not running
    placement.ensure_provider(dead, "dead-host")
    spec = make_spec(a)
    spec["alternates"] = [{"host": dead, "allocations": {dead: {"resources": spec["resources"]}}}]
    claim_and_send(store, placement, spec)
    failed = wait_state(store, spec["uuid"], "ERROR")
    assert "fake hypervisor is broken" in failed["error"]
    assert_nothing_left(store, placement, broken, spec)


def start_one_build(start_compute, config, store, placement):
    """A compute with one build running in a worker (the fake driver's marker is there)."""
    compute = start_compute(config)
    rp = rp_of(config)
    wait_alive(store, rp)
    spec = make_spec(rp)
    claim_and_send(store, placement, spec)
    marker = Path(config["compute"]["state_dir"]) / "fake-instances" / f".{spec['uuid']}.building"
    wait_for(marker.exists, 10, what="the worker to start building")
    return compute, spec


def test_sigterm_lets_a_running_build_finish(start_compute, compute_config, store, placement):
    config = deep_merge(compute_config, {"driver": {"fake": {"build_seconds": 2}}})
    compute, spec = start_one_build(start_compute, config, store, placement)
    rp = rp_of(config)
    assert compute.terminate() == 0
    # The drain: the build in flight was finished and recorded before the daemon exited.
    assert record(store, spec["uuid"])["state"] == "ACTIVE"
    assert DISABLED_TRAIT in placement.get_traits(rp)
    assert store.get(store.keys.alive(rp)) is None


def test_build_cut_by_sigterm_is_resumed_at_next_start(start_compute, compute_config, store,
                                                       placement):
    config = deep_merge(compute_config, {"driver": {"fake": {"build_seconds": 3}},
                                         "compute": {"shutdown_timeout_seconds": 0.5}})
    compute, spec = start_one_build(start_compute, config, store, placement)
    assert compute.terminate() == 0
    assert "1 job(s) still running at shutdown" in compute.log()
    assert record(store, spec["uuid"])["state"] == "BUILDING"
    start_compute(config)
    wait_state(store, spec["uuid"], "ACTIVE", timeout=30)
    starts = [e for e in build_events(config) if e.uuid == spec["uuid"] and e.event == "start"]
    assert len({e.daemon for e in starts}) == len(starts) == 2  # once per daemon run


def test_destroy_sent_while_the_daemon_was_down(start_compute, compute_config, store,
                                                placement):
    rp = rp_of(compute_config)
    compute = start_compute(compute_config)
    wait_alive(store, rp)
    spec = make_spec(rp)
    claim_and_send(store, placement, spec)
    wait_state(store, spec["uuid"], "ACTIVE")
    assert compute.terminate() == 0
    send_destroy(store, spec)
    start_compute(compute_config)
    wait_state(store, spec["uuid"], "DELETED")
    assert_nothing_left(store, placement, compute_config, spec)

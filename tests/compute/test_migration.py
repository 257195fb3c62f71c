"""Moving an instance between hosts with `schedule.py migrate`: real etcd (TLS, RBAC),
Placement, two compute daemons (the fake driver, which moves its guest's file from one
host's state directory to the other's and logs every halt and run) and a controller.

Each move ends with exactly one copy, on the host the instance's keys say, and Placement
holding exactly that host: the destination only after a move, the source only after one
that failed or was called off, and never a migration consumer left over."""

from __future__ import annotations

import json
import time

import pytest

from etcd_compute import events
from etcd_compute.instances import migrations, records
from tests.compute.guests import overlaps
from tests.compute.helpers import claim_and_send, make_spec, record_history, wait_state
from tests.compute.test_host_failure import fast_controller, rp_of
from tests.support import wait_for


@pytest.fixture
def hosts_with(placement, start_compute, start_controller, host_config, schedule_config, store):
    """hosts_with(a_driver, b_driver): hosts a and b (fake driver, each its own state, its
    driver settings given) and a controller, all up (Placement first: the hosts register
    in the test's own)."""

    def started(a_driver: dict | None = None, b_driver: dict | None = None,
                a: dict | None = None) -> dict:
        a = a or host_config("host-a", **({"driver": a_driver} if a_driver else {}))
        b = host_config("host-b", **({"driver": b_driver} if b_driver else {}))
        start_controller(fast_controller(schedule_config))
        computes = {"a": start_compute(a, name="host-a"), "b": start_compute(b, name="host-b")}
        for config in (a, b):
            wait_for(lambda c=config: store.get(store.keys.alive(rp_of(c))), 30,
                     what="heartbeats")
        wait_for(lambda: store.get(store.keys.leader()), 20, what="a controller to lead")
        return {"a": a, "b": b, "computes": computes}

    return started


@pytest.fixture
def two_hosts(hosts_with, compute_config):
    """Hosts a and b (fake driver, each its own state) and a controller."""
    return hosts_with(a=compute_config)


def active_on(store, placement, config) -> dict:
    spec = make_spec(rp_of(config))
    claim_and_send(store, placement, spec)
    wait_state(store, spec["uuid"], "ACTIVE")
    return spec


def fake_files(config) -> set[str]:
    from pathlib import Path

    root = Path(config["compute"]["state_dir"]) / "fake-instances"
    return {path.stem for path in root.glob("*.json")}


def held_by(placement, consumer: str) -> set[str]:
    return set(placement.get_allocations(consumer)["allocations"])


def only_copy_on(hosts, name: str, uuid: str, placement, store) -> None:
    """One copy, on `name`, where its keys and its claim are; no move left in flight."""
    other = "b" if name == "a" else "a"
    assert uuid in fake_files(hosts[name]) and uuid not in fake_files(hosts[other])
    assert records.find(store, uuid)[0] == rp_of(hosts[name])
    assert held_by(placement, uuid) == {rp_of(hosts[name])}
    assert migrations.read(store, uuid) == (None, None)
    assert store.get_prefix(store.keys.host(rp_of(hosts[other])))[0] == []
    assert overlaps([hosts["a"], hosts["b"]]) == []


def revision(store) -> int:
    return store.get_prefix(store.keys.hosts(), keys_only=True)[1]


def moved_as_documented(store, source: str, destination: str, uuid: str, start: int) -> None:
    """The actions table (docs/reference/instance-states.md), row migrate: MIGRATING,
    MIGRATED on the source; as it started (here ACTIVE) on the destination, which waits
    INCOMING (tests/compute/test_daemon.py's walk through the table has one host: the
    move's row is followed here)."""
    assert record_history(store, source, uuid, start + 1) == ["MIGRATING", "MIGRATED"]
    arrived = record_history(store, destination, uuid, start + 1)
    assert arrived[-1] == "ACTIVE" and set(arrived[:-1]) == {"INCOMING"}, arrived


def test_a_live_move_and_a_cold_one_back_leave_one_copy_where_its_claim_is(
        two_hosts, store, placement, run_schedule):
    hosts = two_hosts
    spec = active_on(store, placement, hosts["a"])
    uuid = spec["uuid"]
    start = revision(store)
    moved = run_schedule("migrate", uuid, "--live", "--wait", timeout=90)
    assert moved.code == 0, moved.stderr
    moved_as_documented(store, rp_of(hosts["a"]), rp_of(hosts["b"]), uuid, start)
    assert f"LIVE MIGRATION REQUESTED FOR INSTANCE {uuid} TO host-b" in moved.stdout
    assert "MOVED TO host-b" in moved.stdout
    assert records.find(store, uuid)[1].state == "ACTIVE"
    only_copy_on(hosts, "b", uuid, placement, store)
    last = [e for e in events.read(store, rp_of(hosts["b"]), uuid)
            if e["action"] == "migrate"][-1]
    assert last["result"] == "success" and last["by"]

    start = revision(store)
    back = run_schedule("migrate", uuid, "--wait", "--json", timeout=90)
    assert back.code == 0, back.stderr
    moved_as_documented(store, rp_of(hosts["b"]), rp_of(hosts["a"]), uuid, start)
    answer = json.loads(back.stdout)
    assert answer["outcome"] == "done" and answer["live"] is False
    only_copy_on(hosts, "a", uuid, placement, store)


def test_a_move_that_fails_on_the_source_leaves_it_there_with_its_claim(
        hosts_with, placement, store, run_schedule):
    hosts = hosts_with(a_driver={"fake": {"fail_actions": ["migrate"]}})
    a, b = hosts["a"], hosts["b"]
    spec = active_on(store, placement, a)
    uuid = spec["uuid"]
    failed = run_schedule("migrate", uuid, "--live", "--wait", timeout=90)
    assert failed.code == 1
    assert "cannot migrate (driver.fake.fail_actions)" in failed.stderr
    assert records.find(store, uuid)[1].state == "ACTIVE"
    wait_for(lambda: store.get_prefix(store.keys.host(rp_of(b)))[0] == [], 30,
             what="the destination to discard what it made ready")
    only_copy_on(hosts, "a", uuid, placement, store)


def test_a_move_called_off_half_way_leaves_it_running_where_it_was(
        hosts_with, placement, store, run_schedule):
    hosts = hosts_with(a_driver={"fake": {"action_seconds": 30}})
    a, b = hosts["a"], hosts["b"]
    spec = active_on(store, placement, a)
    uuid = spec["uuid"]
    assert run_schedule("migrate", uuid, "--live").code == 0
    wait_for(lambda: (migrations.read(store, uuid)[0] or {}).get("state") == "migrating", 30,
             what="the move to start")
    assert held_by(placement, uuid) == {rp_of(b)}  # both held while it runs
    migration = migrations.read(store, uuid)[0]
    assert held_by(placement, migration["id"]) == {rp_of(a)}
    started = time.monotonic()
    called_off = run_schedule("migrate-abort", uuid)
    assert called_off.code == 0 and "CALLED OFF" in called_off.stdout
    wait_for(lambda: migrations.read(store, uuid) == (None, None), 30,
             what="the move given up")
    assert time.monotonic() - started < 20  # cancelled, not waited out
    wait_state(store, uuid, "ACTIVE")
    wait_for(lambda: store.get_prefix(store.keys.host(rp_of(b)))[0] == [], 30,
             what="the destination to discard what it made ready")
    only_copy_on(hosts, "a", uuid, placement, store)
    last = [e for e in events.read(store, rp_of(a), uuid) if e["action"] == "migrate"][-1]
    assert last["result"] == "error" and "cancel" in last["error"]


def test_a_move_is_refused_without_a_controller_and_to_a_host_that_is_down(
        placement, start_compute, compute_config, host_config, store, run_schedule):
    a = compute_config
    start_compute(a, name="host-a")
    wait_for(lambda: store.get(store.keys.alive(rp_of(a))), 30, what="a heartbeat")
    spec = active_on(store, placement, a)
    refused = run_schedule("migrate", spec["uuid"], "--live")
    assert refused.code == 2 and "needs the controller" in refused.stderr
    assert held_by(placement, spec["uuid"]) == {rp_of(a)}
    assert migrations.read(store, spec["uuid"]) == (None, None)


def test_a_drain_moves_every_instance_live_or_cold_and_keeps_each_as_it_was(
        two_hosts, store, placement, run_schedule):
    hosts = two_hosts
    running = [active_on(store, placement, hosts["a"]) for _ in range(2)]
    stopped = make_spec(rp_of(hosts["a"]), stopped=True)
    claim_and_send(store, placement, stopped)
    wait_state(store, stopped["uuid"], "SHUTOFF")
    name = hosts["a"]["compute"]["name"]
    drained = run_schedule("host", "drain", name, timeout=120)
    assert drained.code == 0, drained.stderr
    assert drained.stdout.splitlines()[-1] == "DRAINED 3 moved, 0 error, 0 left, 0 gone", \
        drained.stdout
    assert drained.stdout.count("moving live to host-b") == 2
    assert drained.stdout.count("moving cold to host-b") == 1
    for spec in running:
        assert records.find(store, spec["uuid"])[1].state == "ACTIVE"
        only_copy_on(hosts, "b", spec["uuid"], placement, store)
    assert records.find(store, stopped["uuid"])[1].state == "SHUTOFF"
    only_copy_on(hosts, "b", stopped["uuid"], placement, store)
    assert placement.get_usages(rp_of(hosts["a"]))["VCPU"] == 0


def test_a_destination_with_no_room_after_all_leaves_it_where_it_was(
        hosts_with, placement, store, run_schedule):
    """A host whose inventory said it had room, and had none when the guest came."""
    hosts = hosts_with(b_driver={"fake": {"fail_actions": ["incoming"]}})
    a, b = hosts["a"], hosts["b"]
    spec = active_on(store, placement, a)
    uuid = spec["uuid"]
    refused = run_schedule("migrate", uuid, "--live", "--wait", timeout=90)
    assert refused.code == 1
    assert refused.stderr.strip().splitlines() == [
        f"schedule.py: error: move of {uuid} failed: move called off: the destination: "
        "the destination could not make room for it: fake hypervisor has no room for it "
        "after all (driver.fake.fail_actions)"], refused.stderr
    assert records.find(store, uuid)[1].state == "ACTIVE"
    wait_for(lambda: store.get_prefix(store.keys.host(rp_of(b)))[0] == [], 30,
             what="the destination to discard what it made ready")
    only_copy_on(hosts, "a", uuid, placement, store)


def test_a_destroy_during_a_move_leaves_no_copy_and_no_claim(
        hosts_with, placement, store, run_schedule):
    """The move had put the instance's claim on the destination and held the source under
    its migration consumer: its host's destroy may free neither (not this host's alone),
    so the controller's give-up frees both. Nothing of it is left anywhere."""
    hosts = hosts_with(a_driver={"fake": {"action_seconds": 30}})
    a, b = hosts["a"], hosts["b"]
    spec = active_on(store, placement, a)
    uuid = spec["uuid"]
    assert run_schedule("migrate", uuid, "--live").code == 0
    wait_for(lambda: (migrations.read(store, uuid)[0] or {}).get("state") == "migrating", 30,
             what="the move to start")
    migration = migrations.read(store, uuid)[0]
    destroyed = run_schedule("destroy", uuid, "--wait", timeout=60)
    assert destroyed.code == 0, destroyed.stderr
    wait_for(lambda: migrations.read(store, uuid) == (None, None), 30,
             what="the move given up")
    assert records.find(store, uuid)[1].state == "DELETED"  # on its source, not the arrival
    wait_for(lambda: store.get_prefix(store.keys.host(rp_of(b)))[0] == [], 30,
             what="the destination to discard what it made ready")
    wait_for(lambda: not held_by(placement, uuid) and not held_by(placement, migration["id"]),
             30, what="both claims freed")
    assert uuid not in fake_files(a) and uuid not in fake_files(b)
    assert placement.get_usages(rp_of(a))["VCPU"] == 0
    assert placement.get_usages(rp_of(b))["VCPU"] == 0


def test_a_destroy_after_a_live_move_switched_over_destroys_it_where_it_landed(
        hosts_with, placement, store, run_schedule):
    """The guest runs on the destination and the source's job has not ended (the fake's
    switch_seconds) when the destroy comes: the cancel is too late. The move ends
    (MIGRATED), the instance is handed over with the destroy and the destination destroys
    it: no guest on either host, no claim, no keys (the source's job end once destroyed
    on the source instead, and left the guest running on the destination, owned by
    nothing)."""
    hosts = hosts_with(a_driver={"fake": {"action_seconds": 0.5, "switch_seconds": 15}})
    a, b = hosts["a"], hosts["b"]
    spec = active_on(store, placement, a)
    uuid = spec["uuid"]
    assert run_schedule("migrate", uuid, "--live").code == 0
    migration = wait_for(lambda: migrations.read(store, uuid)[0], 30, what="the move")
    wait_for(lambda: uuid in fake_files(b), 60, interval=0.05, what="the switch-over")
    destroyed = run_schedule("destroy", uuid)
    assert destroyed.code == 0, destroyed.stderr
    # Asked while the source's job runs on after the switch (its record says so).
    assert records.read_record(store, rp_of(a), uuid).state == "MIGRATING"
    assert uuid not in fake_files(a)
    wait_state(store, uuid, "DELETED", timeout=60)
    wait_for(lambda: migrations.read(store, uuid) == (None, None), 30,
             what="the move ended")
    assert records.find(store, uuid)[0] == rp_of(b)
    assert records.find(store, uuid)[1].state == "DELETED"
    wait_for(lambda: store.get_prefix(store.keys.host(rp_of(a)))[0] == [], 30,
             what="the source's keys of it gone")
    # At b, what any destroy leaves: its DELETED record and events, on their lease.
    left = {entry.key for entry in store.get_prefix(store.keys.host(rp_of(b)))[0]}
    assert left == {store.keys.record(rp_of(b), uuid), store.keys.events(rp_of(b), uuid)}
    assert uuid not in fake_files(a) and uuid not in fake_files(b)
    # The controller frees the source's claim just after its hand-over, and b's destroy
    # can be quicker than that (a run read it held 70 ms before the controller freed it).
    wait_for(lambda: not held_by(placement, migration["id"]), 10,
             what="the source's claim freed after the hand-over")
    assert not held_by(placement, uuid)
    assert placement.get_usages(rp_of(a))["VCPU"] == 0
    assert placement.get_usages(rp_of(b))["VCPU"] == 0
    assert overlaps([a, b]) == []
    moved = [e for e in events.read(store, rp_of(b), uuid) if e["action"] == "migrate"][-1]
    assert moved["result"] == "success"


def test_an_instance_out_of_default_stays_out_through_a_live_move_and_a_cold_one(
        two_hosts, store, placement, run_schedule):
    """Its security groups are its own (spec and record) and go where it goes; the guest
    there keeps the filter it had (the fake's flag travels with its guest's file)."""
    from pathlib import Path

    hosts = two_hosts
    spec = active_on(store, placement, hosts["a"])
    uuid = spec["uuid"]
    out = run_schedule("security-groups", "none", uuid, "--wait", timeout=60)
    assert out.code == 0, out.stderr

    def groups_on(name: str) -> tuple:
        host = rp_of(hosts[name])
        guest = Path(hosts[name]["compute"]["state_dir"]) / "fake-instances" / f"{uuid}.json"
        return (records.read_spec(store, host, uuid)[1]["security_groups"],
                records.read_record(store, host, uuid).record["security_groups"],
                json.loads(guest.read_text())["security_groups"])

    assert groups_on("a") == ([], [], [])
    for flags, there in ((["--live"], "b"), ([], "a")):
        moved = run_schedule("migrate", uuid, *flags, "--wait", timeout=90)
        assert moved.code == 0, moved.stderr
        only_copy_on(hosts, there, uuid, placement, store)
        assert groups_on(there) == ([], [], []), there
    shown = run_schedule(uuid)
    assert "secgroups  none\n" in shown.stdout


def test_a_cold_move_asked_with_verify_waits_then_is_reverted_or_confirmed(
        two_hosts, store, placement, run_schedule):
    """`migrate --verify` (the compute API's migrate): defined and running on b, the
    source's stopped copy and its claim kept, until migrate-revert (running on a again, b
    emptied, never two copies running at once) or migrate-confirm (on b alone)."""
    hosts = two_hosts
    spec = active_on(store, placement, hosts["a"])
    uuid = spec["uuid"]
    for then in ("migrate-revert", "migrate-confirm"):
        waiting = run_schedule("migrate", uuid, "--verify", "--wait", "--json", timeout=90)
        assert waiting.code == 0, waiting.stderr
        asked = json.loads(waiting.stdout)
        migration, _ = migrations.read(store, uuid)
        assert migration["state"] == "finished" and asked["record"]["state"] == "MIGRATED"
        assert uuid in fake_files(hosts["a"]) and uuid in fake_files(hosts["b"])
        assert held_by(placement, uuid) == {rp_of(hosts["b"])}
        assert held_by(placement, asked["migration"]) == {rp_of(hosts["a"])}
        time.sleep(1)  # still waiting: nothing hands it over by itself
        assert migrations.read(store, uuid)[0]["state"] == "finished"
        done = run_schedule(then, uuid, *(["--wait"] if then == "migrate-revert" else []),
                            timeout=60)
        assert done.code == 0, done.stderr
        if then == "migrate-revert":  # followed until the source runs it again
            assert "STARTS AGAIN ONCE ITS DESTINATION DISCARDED ITS COPY" in done.stdout
            assert records.find(store, uuid)[1].state == "ACTIVE"
        where = "a" if then == "migrate-revert" else "b"
        wait_for(lambda w=where: uuid not in fake_files(hosts["b" if w == "a" else "a"]),
                 30, what="the other copy gone")
        wait_state(store, uuid, "ACTIVE")
        only_copy_on(hosts, where, uuid, placement, store)
        kinds = [e["action"] for e in events.read(store, rp_of(hosts[where]), uuid)]
        assert kinds[-1] in ("confirm-resize", "start"), kinds


def test_a_revert_whose_destination_is_cut_off_starts_the_source_only_once_it_fenced(
        start_compute, start_controller, compute_config, host_config, schedule_config, store,
        placement, run_schedule):
    """The destination runs the guest a cold move defined there, and is cut off from etcd
    as the move is reverted: it never hears of the revert. The source's copy stays stopped
    until the destination lost its lease and fenced itself (its guest powered off) and the
    controller recovered it; then it starts. Back, the destination discards its copy: one
    copy, never two running at once."""
    from etcd_compute.config import deep_merge
    from tests.compute.test_host_failure import two_hosts_and_a_controller
    from tools.local_services.proxy import CuttableProxy

    address, port = compute_config["etcd"]["endpoints"][0].rsplit(":", 1)
    proxy = CuttableProxy(address, int(port)).start()
    try:
        there = deep_merge(compute_config, {"etcd": {"endpoints": [proxy.endpoint]}})
        there, here, computes = two_hosts_and_a_controller(
            start_compute, start_controller, compute_config, host_config, schedule_config,
            store, a_config=there)
        hosts = {"a": here, "b": there}
        uuid = active_on(store, placement, here)["uuid"]
        waiting = run_schedule("migrate", uuid, "--verify", "--host", rp_of(there), "--wait",
                               timeout=90)
        assert waiting.code == 0, waiting.stderr
        assert migrations.read(store, uuid)[0]["state"] == "finished"
        proxy.cut()
        done = run_schedule("migrate-revert", uuid, timeout=60)
        assert done.code == 0, done.stderr
        assert migrations.read(store, uuid)[0]["state"] == "reverting"
        assert records.read_record(store, rp_of(here), uuid).state == "SHUTOFF"
        wait_for(lambda: "fenced: powered off 1 guest(s)" in computes[rp_of(there)].log(), 15,
                 what="the destination to fence itself")
        # (the destination's INCOMING record stays until it is back: read the source's)
        wait_for(lambda: records.read_record(store, rp_of(here), uuid).state == "ACTIVE", 30,
                 what="the source's copy started")
        assert records.find(store, uuid)[0] == rp_of(here)
        assert migrations.read(store, uuid) == (None, None)
        proxy.restore()
        wait_for(lambda: uuid not in fake_files(there), 30,
                 what="the destination to discard its copy on return")
        wait_for(lambda: store.get_prefix(store.keys.host(rp_of(there)))[0] == [], 30,
                 what="the destination's keys for it gone")
        only_copy_on(hosts, "a", uuid, placement, store)
    finally:
        proxy.stop()

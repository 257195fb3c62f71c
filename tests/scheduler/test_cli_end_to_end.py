"""schedule.py and compute.py as real processes, against real etcd and Placement."""

from __future__ import annotations

import re

from etcd_compute import messages
from etcd_compute.drivers.fake import boot_log
from tests.support import wait_for


def test_schedule_wait_show_destroy(compute_config, start_compute, store, placement,
                                    run_schedule):
    compute = start_compute(compute_config)
    host = compute_config["compute"]["uuid"]
    wait_for(lambda: store.get(store.keys.alive(host)), what="compute heartbeat")

    run = run_schedule("resources=VCPU:1,MEMORY_MB:256,DISK_GB:1", "--wait", "--name", "web")
    assert run.code == 0, run.stderr + compute.log()
    match = re.search(r"^NOTIFIED TARGET, (\S+), OF INSTANCE (\S+)$", run.stdout, re.M)
    assert match, run.stdout
    assert match.group(1) == host
    uuid = match.group(2)
    assert re.search(rf"^{uuid} ACTIVE on \S+ ip=\S+", run.stdout, re.M), run.stdout
    claimed = placement.get_allocations(uuid)
    assert {rp: a["resources"] for rp, a in claimed["allocations"].items()} == {
        host: {"VCPU": 1, "MEMORY_MB": 256, "DISK_GB": 1}}
    assert claimed["project_id"] == "00000000-0000-0000-0000-000000000001"
    assert claimed["consumer_generation"] == 1

    shown = run_schedule(uuid)
    assert shown.code == 0, shown.stderr
    assert re.search(r"^state\s+ACTIVE$", shown.stdout, re.M), shown.stdout
    ip = re.search(r"^ip\s+(\S+)$", shown.stdout, re.M).group(1)
    assert ip != "-"
    assert run_schedule(uuid, "--json").json()["ip"] == ip

    console = wait_for(lambda: (lambda r: r if r.code == 0 else None)(
        run_schedule("console", uuid)), what="console published")
    # What the fake driver's guest printed, as the compute published it: nothing else.
    assert console.stdout == boot_log(uuid)

    listed = run_schedule("list")
    assert uuid in listed.stdout and "ACTIVE" in listed.stdout

    destroyed = run_schedule("destroy", uuid, "--wait")
    assert destroyed.code == 0, destroyed.stderr
    assert f"DESTROY REQUESTED FOR INSTANCE {uuid}" in destroyed.stdout
    assert placement.get_allocations(uuid)["allocations"] == {}
    assert store.get(store.keys.spec(host, uuid)) is None
    assert store.get(store.keys.booted(host, uuid)) is None
    record, _ = store.read(messages.INSTANCE_RECORD, store.keys.record(host, uuid))
    assert record["state"] == "DELETED"


def test_unknown_uuid_and_console_errors(store, placement, run_schedule):
    missing = "0b1c2d3e-4f50-4617-8293-a4b5c6d7e8f9"
    for args in (["destroy", missing], [missing], ["console", missing]):
        run = run_schedule(*args)
        assert run.code == 1
        assert run.stderr.count("\n") == 1 and f"no instance {missing}" in run.stderr
        assert "Traceback" not in run.stderr


def test_failed_build_then_destroy_removes_record(compute_config, start_compute, store,
                                                  placement, run_schedule):
    compute = start_compute(compute_config)
    host = compute_config["compute"]["uuid"]
    wait_for(lambda: store.get(store.keys.alive(host)), what="compute heartbeat")
    run = run_schedule("resources=VCPU:1,MEMORY_MB:128,DISK_GB:1", "--image", "file:///no/such/image",
                       "--wait", "--hint", "anti-affinity=broken")
    assert run.code == 1, run.stderr + compute.log()
    uuid = re.search(r"OF INSTANCE (\S+)$", run.stdout, re.M).group(1)
    assert re.search(rf"^{uuid} ERROR on \S+ error=.*not found", run.stdout, re.M), run.stdout
    shown = run_schedule(uuid)
    assert re.search(r"^state\s+ERROR$", shown.stdout, re.M)
    assert "/no/such/image" in shown.stdout
    assert placement.get_allocations(uuid)["allocations"] == {}

    removed = run_schedule("destroy", uuid)
    assert removed.code == 0, removed.stderr
    assert f"REMOVED INSTANCE {uuid}" in removed.stdout
    assert store.get(store.keys.record(host, uuid)) is None
    assert store.get(store.keys.location(uuid)) is None
    assert store.get_prefix(store.keys.group("broken"))[0] == []
    assert run_schedule(uuid).code == 1


def test_fake_hosts_anti_affinity_through_cli(fake_hosts_config, start_compute, store,
                                              placement, run_schedule):
    start_compute(fake_hosts_config, "--fake-hosts", "4")
    wait_for(lambda: len(store.get_prefix(store.keys.alive_prefix())[0]) == 4,
             what="4 fake hosts alive")
    run = run_schedule("resources=VCPU:1,MEMORY_MB:128,DISK_GB:1", "--count", "4", "--wait",
                       "--hint", "anti-affinity=spread-me")
    assert run.code == 0, run.stdout + run.stderr
    targets = re.findall(r"^NOTIFIED TARGET, (\S+), OF INSTANCE (\S+)$", run.stdout, re.M)
    assert len(targets) == 4 and len({host for host, _ in targets}) == 4
    assert len(re.findall(r" ACTIVE on ", run.stdout)) == 4
    hosts = run_schedule("hosts", "--json").json()
    assert sorted(h["instances"] for h in hosts) == [1, 1, 1, 1]
    assert all(h["alive"] and h["resources"]["VCPU"]["used"] == 1 for h in hosts)
    table = run_schedule("hosts")
    assert table.stdout.splitlines()[0].split()[:5] == ["NAME", "UUID", "ALIVE", "STATUS",
                                                        "INSTANCES"]
    fifth = run_schedule("resources=VCPU:1,MEMORY_MB:128,DISK_GB:1",
                         "--hint", "anti-affinity=spread-me")
    assert fifth.code == 1
    assert "AntiAffinityFilter removed 4 host(s)" in fifth.stdout

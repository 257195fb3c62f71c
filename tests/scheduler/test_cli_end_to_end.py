"""schedule.py and compute.py as real processes, against real etcd and Placement."""

from __future__ import annotations

import re

from etcd_compute import messages
from tests.conftest import wait_for


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

    listed = run_schedule("list")
    assert uuid in listed.stdout and "ACTIVE" in listed.stdout

    destroyed = run_schedule("destroy", uuid, "--wait")
    assert destroyed.code == 0, destroyed.stderr
    assert f"DESTROY REQUESTED FOR INSTANCE {uuid}" in destroyed.stdout
    assert placement.get_allocations(uuid)["allocations"] == {}
    assert store.get(store.keys.host_instance(host, uuid)) is None
    assert store.get(store.keys.booted(uuid)) is None
    record, _ = store.read(messages.INSTANCE_RECORD, store.keys.instance(uuid))
    assert record["state"] == "DELETED"


def test_unknown_uuid_and_console_errors(store, placement, run_schedule):
    missing = "0b1c2d3e-4f50-4617-8293-a4b5c6d7e8f9"
    for args in (["destroy", missing], [missing], ["console", missing]):
        run = run_schedule(*args)
        assert run.code == 1
        assert run.stderr.count("\n") == 1 and f"no instance {missing}" in run.stderr
        assert "Traceback" not in run.stderr

"""--count is all or nothing; bad input and dead services give one line, never a traceback."""

from __future__ import annotations

import re
from collections import Counter

import pytest

from etcd_compute.config import deep_merge
from tests.scheduler.conftest import add_host
from tools.local_services import free_port

QUERY = "resources=VCPU:1,MEMORY_MB:64,DISK_GB:1"


def test_count_50_with_room_for_49_claims_and_writes_nothing(store, placement, run_schedule):
    hosts = [add_host(placement, store, f"room-{i}",
                      totals={"VCPU": 7, "MEMORY_MB": 4096, "DISK_GB": 100}) for i in range(7)]
    run = run_schedule(QUERY, "--count", "50")
    assert run.code == 1, run.stderr
    lines = run.stdout.splitlines()
    assert lines[:2] == ["NO ALLOCATIONS LEFT",
                         "room for only 49 of the 50 instances requested; nothing was claimed"]
    assert "7 of 7 candidate host(s) would be full with the earlier instances" in lines[2]
    for host in hosts:
        assert placement.get_usages(host)["VCPU"] == 0
    written, _ = store.get_prefix(store.keys.prefix + "/", keys_only=True)
    assert [e.key for e in written if "/alive/" not in e.key] == []

    run = run_schedule(QUERY, "--count", "49", "--name", "batch", "--json")
    assert run.code == 0, run.stderr
    instances = run.json()["instances"]
    assert len(instances) == 49
    assert {i["name"] for i in instances} == {f"batch-{n}" for n in range(1, 50)}
    for host in hosts:
        assert placement.get_usages(host)["VCPU"] == 7
    written, _ = store.get_prefix(store.keys.hosts(), keys_only=True)
    kinds = Counter(store.keys.parse_host_key(e.key).kind for e in written)
    located, _ = store.get_prefix(store.keys.locations(), keys_only=True)
    assert kinds == {"specs": 49, "instances": 49} and len(located) == 49


@pytest.mark.parametrize("args, code, fault", [
    ([], 2, "nothing to do"),
    (["resources=VCPU:one"], 2, "resources: bad amount 'one' for VCPU"),
    (["resources=VCPU:1&colour=red"], 2, "unknown key 'colour'"),
    (["fish"], 2, "'fish' is not a query"),
    (["resources=VCPU:1", "--count", "x"], 2, "--count: invalid int value"),
    (["resources=VCPU:1", "--hint", "sticky=g"], 2, "--hint sticky"),
    (["resources=VCPU:1", "--key", "/nonexistent/key.pub"], 2, "--key /nonexistent/key.pub"),
    (["destroy"], 2, "destroy: expected exactly one instance uuid"),
    (["destroy", "xyz"], 2, "'xyz' is not an instance uuid"),
    (["list", "extra"], 2, "list: takes no arguments"),
])
def test_bad_input_is_one_line(run_schedule, args, code, fault):
    run = run_schedule(*args)
    assert run.code == code
    assert run.stdout == ""
    assert run.stderr.startswith("schedule.py: error: ") and run.stderr.count("\n") == 1
    assert fault in run.stderr


def test_a_count_over_etcds_txn_limit_is_refused_before_anything(schedule_config, write_yaml,
                                                                  run_schedule, store,
                                                                  placement):
    hosts = [add_host(placement, store, f"txn-{i}", totals={"VCPU": 64, "MEMORY_MB": 65536,
                                                           "DISK_GB": 100}) for i in range(5)]
    default_etcd = write_yaml("etcd-default.yaml", deep_merge(
        schedule_config, {"scheduler": {"etcd_max_txn_ops": 128}}))
    run = run_schedule("resources=VCPU:1,MEMORY_MB:64,DISK_GB:1", "--count", "50",
                       "--hint", "anti-affinity=g", config=default_etcd)
    assert run.code == 2 and run.stdout == ""
    assert run.stderr == ("schedule.py: error: --count 50 needs 200 etcd operations in one "
                          "transaction; etcd allows 128 (raise etcd's --max-txn-ops and "
                          "scheduler.etcd_max_txn_ops together)\n")
    assert all(placement.get_usages(host)["VCPU"] == 0 for host in hosts)


def test_unreachable_services_are_one_line(schedule_config, write_yaml, run_schedule):
    dead = f"127.0.0.1:{free_port()}"
    no_placement = write_yaml("no-placement.yaml", deep_merge(
        schedule_config, {"placement": {"endpoint": f"http://{dead}", "timeout": 2}}))
    no_etcd = write_yaml("no-etcd.yaml", deep_merge(
        schedule_config, {"etcd": {"endpoints": [dead], "timeout": 1}}))
    for config, args, service in [(no_placement, [QUERY], "Placement"),
                                  (no_placement, ["hosts"], "Placement"),
                                  (no_etcd, ["list"], "etcd"),
                                  (no_etcd, ["0b1c2d3e-4f50-4617-8293-a4b5c6d7e8f9"], "etcd")]:
        run = run_schedule(*args, config=config)
        assert run.code == 3, (args, run.stderr)
        assert re.fullmatch(rf"schedule\.py: error: {service} at \S+ is unreachable .*\n",
                            run.stderr), run.stderr

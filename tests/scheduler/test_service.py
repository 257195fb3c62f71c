"""The scheduler service (`schedule.py serve` draining the request queue in etcd), for real:
etcd with TLS and RBAC, Placement, `schedule.py` and `schedule.py serve` as processes.

The same command gives the same output and exit status through the service as without it;
concurrent requests are batched and never overcommit; a leader killed between its claim and
its etcd write leaves nothing claimed twice, and every request is answered exactly once by
the next leader; hostile queue entries get a one-line answer and stop nothing.
"""

from __future__ import annotations

import json
import os
import re
import signal
import uuid as uuidlib
from collections import Counter
from concurrent.futures import ThreadPoolExecutor

import pytest

from etcd_compute.config import deep_merge
from etcd_compute.errors import EtcdComputeError
from etcd_compute.etcd import Put, Store, Txn
from etcd_compute.scheduler.queue import request_message
from etcd_compute.scheduler.spec import RequestSpec
from tests.scheduler.conftest import add_host
from tests.support import wait_for
from tools.local_services.proxy import CuttableProxy

QUERY = "resources=VCPU:1,MEMORY_MB:64,DISK_GB:1"
UUID = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")


def service_config(schedule_config, **scheduler):
    return deep_merge(schedule_config, {"logging": {"level": "INFO"},
                                        "scheduler": {"controller_lease_ttl": 2, **scheduler}})


def serving(start_controller, schedule_config, store, **scheduler):
    """A `schedule.py serve` that leads and takes requests."""
    process = start_controller(service_config(schedule_config, **scheduler))
    wait_for(lambda: store.get(store.keys.queue_open()), 30, what="the queue to open")
    return process


def shape(text: str) -> str:
    """Output without what differs from run to run: uuids, numbers (IPs, room left), the
    progress lines that --wait prints only if it happens to see those states."""
    lines = [line for line in UUID.sub("U", text).splitlines()
             if " SCHEDULED on " not in line and " BUILDING on " not in line]
    return re.sub(r"[0-9]+", "N", "\n".join(lines))


def consumers(placement, hosts):
    found = Counter()
    for rp in hosts:
        found.update(list(placement.get(f"/resource_providers/{rp}/allocations")
                          ["allocations"]))
    return found


def located(store):
    entries, _ = store.get_prefix(store.keys.locations(), keys_only=True)
    return {e.key.rsplit("/", 1)[-1] for e in entries}


def test_requests_through_the_service_print_and_exit_as_direct_ones(
        store, placement, run_schedule, start_compute, compute_config, start_controller,
        schedule_config):
    rp = compute_config["compute"]["uuid"]
    start_compute(deep_merge(compute_config, {"compute": {"inventory": {
        "VCPU": {"total": 16, "reserved": 0, "allocation_ratio": 1.0}}}}))
    wait_for(lambda: store.get(store.keys.alive(rp)), 30, what="the compute's heartbeat")

    def outcomes():
        return [run_schedule(QUERY, "--wait"),
                run_schedule(QUERY + "&required=CUSTOM_NOWHERE"),
                run_schedule(QUERY, "--count", "2", "--name", "web", "--json"),
                run_schedule(QUERY, "--count", "40")]

    direct = outcomes()
    controller = serving(start_controller, schedule_config, store)
    served = outcomes()
    for alone, through in zip(direct, served, strict=True):
        assert (through.code, shape(through.stdout), through.stderr) == \
            (alone.code, shape(alone.stdout), alone.stderr)
    assert [r.code for r in served] == [0, 1, 0, 1]
    assert served[0].stdout.splitlines()[-1].startswith(f"{UUID.findall(served[0].stdout)[1]}"
                                                        " ACTIVE on ")
    assert served[1].stdout.splitlines()[0] == "NO ALLOCATIONS LEFT"
    one, two = json.loads(served[2].stdout)["instances"]
    assert (one["name"], two["name"], one["host"]) == ("web-1", "web-2", rp)
    # The service answered them (its instance uuids come from the request's: version 5).
    assert UUID.findall(served[0].stdout)[1][14] == "5"
    assert UUID.findall(direct[0].stdout)[1][14] == "4"
    assert controller.log().count("1 answered") == 2
    assert controller.log().count("1 refused") == 2


def test_concurrent_requests_are_batched_and_never_overcommit(
        store, placement, run_schedule, start_controller, schedule_config):
    hosts = [add_host(placement, store, f"small-{i}",
                      totals={"VCPU": 3, "MEMORY_MB": 1024, "DISK_GB": 10}) for i in range(2)]
    # Held (SIGSTOP) while the ten requests queue up, so that they arrive together however
    # slowly this machine starts ten Pythons; its lease outlives the pause.
    controller = serving(start_controller, schedule_config, store, controller_lease_ttl=60)
    os.kill(controller.pid, signal.SIGSTOP)
    try:
        with ThreadPoolExecutor(10) as pool:
            pending = [pool.submit(run_schedule, QUERY, timeout=120) for _ in range(10)]
            wait_for(lambda: len(store.get_prefix(store.keys.queue_requests(),
                                                  keys_only=True)[0]) == 10,
                     90, what="ten requests in the queue")
            os.kill(controller.pid, signal.SIGCONT)
            runs = [future.result() for future in pending]
    finally:
        os.kill(controller.pid, signal.SIGCONT)
    codes = Counter(r.code for r in runs)
    assert codes == {0: 6, 1: 4}, [r.stderr for r in runs]
    assert all(r.stdout.startswith("NO ALLOCATIONS LEFT\n") for r in runs if r.code == 1)
    for rp in hosts:
        assert placement.get_usages(rp)["VCPU"] == 3
    instances = [UUID.findall(r.stdout)[1] for r in runs if r.code == 0]
    assert set(consumers(placement, hosts)) == set(instances) == located(store)
    sizes = [int(n) for n in re.findall(r"pass of (\d+) request", controller.log())]
    assert sizes[0] == 10, sizes  # all queued before the pass: one pass answers them all


# Its premise is a timing: the first leader's etcd write, held 1 s by the proxy, is still
# held when the test sees the claim and cuts. On a machine at load 16-20 the test saw the
# claim late (2 of 2 runs): the write had landed, the standby had nothing to free.
@pytest.mark.flaky(reruns=1)
def test_a_leader_killed_between_claim_and_write_answers_every_request_once(
        store, placement, run_schedule, start_controller, schedule_config):
    """The first leader talks to etcd through a proxy that holds what it sends for a second:
    once its claim shows in Placement, its etcd write is still held; the path is cut and the
    leader killed. The standby frees those claims and answers every request, once."""
    hosts = [add_host(placement, store, f"host-{i}") for i in range(3)]
    (endpoint,) = schedule_config["etcd"]["endpoints"]
    host, port = endpoint.rsplit(":", 1)
    proxy = CuttableProxy(host, int(port)).start()
    try:
        through_proxy = deep_merge(schedule_config, {"etcd": {"endpoints": [proxy.endpoint]}})
        first = serving(start_controller, through_proxy, store, controller_lease_ttl=5)
        proxy.request_delay = 1.0
        second = start_controller(service_config(schedule_config), name="standby")
        with ThreadPoolExecutor(6) as pool:
            runs = pool.map(lambda _: run_schedule(QUERY, timeout=120), range(6))
            wait_for(lambda: consumers(placement, hosts), 60, interval=0.02,
                     what="the first leader's claim")
            proxy.cut()
            first.kill9()
            claimed_by_the_first = set(consumers(placement, hosts))
            runs = list(runs)
    finally:
        proxy.stop()
    assert [r.code for r in runs] == [0] * 6, [r.stderr for r in runs]
    assert all(r.stdout.count("NOTIFIED TARGET") == 1 for r in runs)
    instances = {UUID.findall(r.stdout)[1] for r in runs}
    held = consumers(placement, hosts)
    assert len(instances) == 6 and set(held) == instances == located(store)
    assert all(count == 1 for count in held.values())
    assert store.get_prefix(store.keys.queue_requests())[0] == []
    assert "pass of" not in first.log()  # it never wrote
    freed = re.findall(r"freed instance ([0-9a-f-]{36})", second.log())
    assert claimed_by_the_first and set(freed) == claimed_by_the_first
    assert "answered" in second.log()


def test_hostile_queue_entries_get_a_one_line_answer_and_stop_nothing(
        store, placement, run_schedule, start_controller, schedule_config, host_credentials):
    add_host(placement, store, "hv")
    controller = serving(start_controller, schedule_config, store)
    good = request_message(RequestSpec.build(QUERY), "test")
    entries = {
        str(uuidlib.uuid4()): b"\xff{not json",
        str(uuidlib.uuid4()): json.dumps({**good, "count": 10**6}),
        str(uuidlib.uuid4()): json.dumps({**good, "query": "resources=VCPU:1"}),
        str(uuidlib.uuid4()): json.dumps({**good, "user_data": "x" * 70000}),
        str(uuidlib.uuid4()): "[" * 100000,
    }
    for name, value in entries.items():
        store.client.put(store.keys.queue_request(name), value)
    store.client.put(store.keys.queue_requests() + "not-a-uuid", json.dumps(good))
    served = run_schedule(QUERY)
    assert served.code == 0 and "NOTIFIED TARGET" in served.stdout, served.stderr
    for name in entries:
        wait_for(lambda n=name: store.get(store.keys.queue_answer(n)), 20, what="an answer")
        answer = json.loads(store.get(store.keys.queue_answer(name)).value)
        assert answer["error"]["kind"] == "usage"
        assert "\n" not in answer["error"]["message"]
    wait_for(lambda: not store.get_prefix(store.keys.queue_requests())[0], 20,
             what="the queue to empty")
    assert controller.alive() and "Traceback" not in controller.log()
    # A compute host may not ask (nor read what others ask: tenants' user-data).
    rp = str(uuidlib.uuid4())
    with Store(host_credentials(rp)["etcd"]) as host:
        with pytest.raises(EtcdComputeError, match="PERMISSION_DENIED"):
            host.commit(Txn([], [Put(host.keys.queue_request(str(uuidlib.uuid4())),
                                     json.dumps(good))]))
        with pytest.raises(EtcdComputeError, match="PERMISSION_DENIED"):
            host.get_prefix(host.keys.queue_requests())

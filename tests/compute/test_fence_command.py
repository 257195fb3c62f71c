"""A configured fence agent (`scheduler.fencing.command`, an IPMI or Redfish agent's command
line) before a dead host's instances are recovered: real etcd (TLS, RBAC), Placement, two
compute daemons (the fake driver, whose guests.log says when each guest ran where) and the
controller running the agent.

An agent that powers the host off lets its instance run elsewhere at once, long before
TTL + grace; one that hangs is killed (with its process group) at its timeout, and the
instance waits out TTL + grace as without fencing. Either way: one copy at a time, the
claim on the new host alone, and the recovery's event says which in one line."""

from __future__ import annotations

import sys
import time
from pathlib import Path

from etcd_compute import events
from etcd_compute.config import deep_merge
from etcd_compute.drivers.fake import FakeDriver
from tests.compute.guests import overlaps
from tests.compute.helpers import fake_instances, record, wait_state
from tests.compute.test_host_failure import instance_on, rp_of
from tests.support import wait_for
from tools.local_services.proxy import CuttableProxy

AGENT = Path(__file__).resolve().parent / "fence_agent.py"
TTL = 3  # the hosts' heartbeat_ttl (tests/conftest.py)


def two_hosts(start_compute, start_controller, schedule_config, store, a, b, grace: float,
              command: list[str], command_timeout: float) -> dict:
    start_controller(deep_merge(schedule_config, {"scheduler": {
        "host_failure_grace_seconds": grace, "controller_lease_ttl": 3,
        "fencing": {"command": command, "command_timeout_seconds": command_timeout}}}))
    computes = {"a": start_compute(a, name="host-a"), "b": start_compute(b, name="host-b")}
    for config in (a, b):
        wait_for(lambda c=config: store.get(store.keys.alive(rp_of(c))), 30, what="heartbeats")
    wait_for(lambda: store.get(store.keys.leader()), 20, what="a controller to lead")
    return computes


def recovered_event(store, host: str, uuid: str) -> dict:
    return [e for e in events.read(store, host, uuid) if e["action"] == "recover"][-1]


def test_a_fence_agent_that_powers_the_host_off_lets_its_instance_run_elsewhere_at_once(
        start_compute, start_controller, compute_config, host_config, schedule_config, store,
        placement, write_yaml):
    a, b = compute_config, host_config("host-b")
    grace = 60  # long: a recovery sooner than TTL + grace came from the agent
    agent_config = write_yaml("host-a-for-its-fence-agent.yaml", a)
    computes = two_hosts(start_compute, start_controller, schedule_config, store, a, b, grace,
                         [sys.executable, str(AGENT), str(agent_config), "{name}"], 30)
    spec = instance_on(store, placement, a, on_host_failure="rebuild")
    uuid = spec["uuid"]

    killed = time.monotonic()
    computes["a"].kill9()  # the daemon only: its guest runs on until the agent powers it off
    assert FakeDriver(a).running() == {uuid}
    wait_for(lambda: (record(store, uuid) or {}).get("host") == rp_of(b), TTL + grace,
             interval=0.05, what="the instance recovered on host-b")
    recovery = time.monotonic() - killed
    wait_state(store, uuid, "ACTIVE", timeout=30)

    assert recovery < TTL + grace, recovery
    assert FakeDriver(a).running() == set()  # off, by the agent, before b ran it:
    assert overlaps([a, b]) == []
    assert set(placement.get_allocations(uuid)["allocations"]) == {rp_of(b)}
    assert placement.get_usages(rp_of(a))["VCPU"] == 0
    detail = recovered_event(store, rp_of(b), uuid)["detail"]
    assert "its host fenced (fence command exit 0: powered off (1 guest(s) halted)) after " \
        in detail and "\n" not in detail, detail


def test_a_fence_agent_that_hangs_is_killed_and_the_host_waits_out_ttl_and_grace(
        start_compute, start_controller, compute_config, host_config, schedule_config, store,
        placement, tmp_path):
    grace, timeout = 8, 2
    pid_file = tmp_path / "agent.pid"
    host, port = compute_config["etcd"]["endpoints"][0].rsplit(":", 1)
    proxy = CuttableProxy(host, int(port)).start()
    try:
        a = deep_merge(compute_config, {"etcd": {"endpoints": [proxy.endpoint]}})
        b = host_config("host-b")
        computes = two_hosts(start_compute, start_controller, schedule_config, store, a, b,
                             grace, ["sh", "-c", f"echo $$ > {pid_file}; exec sleep 600"],
                             timeout)
        spec = instance_on(store, placement, a, on_host_failure="rebuild")
        uuid = spec["uuid"]

        cut = time.monotonic()
        proxy.cut()  # a cannot renew its lease: it powers its guest off itself
        wait_for(lambda: "fenced: powered off 1 guest(s)" in computes["a"].log(), 15,
                 what="host-a to fence itself")
        wait_for(pid_file.exists, TTL + 10, what="the controller to run the fence agent")
        agent = int(pid_file.read_text())
        wait_for(lambda: (record(store, uuid) or {}).get("host") == rp_of(b),
                 TTL + grace + timeout + 15, interval=0.05,
                 what="the instance recovered on host-b")
        recovery = time.monotonic() - cut
        wait_state(store, uuid, "ACTIVE", timeout=30)

        # Not fenced: the host's lease expired (within TTL of the cut), then grace.
        assert recovery >= grace, recovery
        assert not Path(f"/proc/{agent}").exists() or \
            Path(f"/proc/{agent}/stat").read_text().split()[2] == "Z", "the agent lives on"
        detail = recovered_event(store, rp_of(b), uuid)["detail"]
        assert f"its host not fenced (command: no answer within {timeout} s): recovered " \
            "after TTL + grace" in detail and "\n" not in detail, detail
        assert set(placement.get_allocations(uuid)["allocations"]) == {rp_of(b)}
        assert overlaps([a, b]) == []

        proxy.restore()  # back: it removes its stale copy, touching no claim
        wait_for(lambda: uuid not in fake_instances(a), 30, what="host-a's stale copy gone")
        assert set(placement.get_allocations(uuid)["allocations"]) == {rp_of(b)}
        assert overlaps([a, b]) == []
    finally:
        proxy.stop()

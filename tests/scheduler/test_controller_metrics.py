"""`schedule.py serve` metrics, as served by two real controllers (a leader and a standby)
while the leader reschedules a failed build."""

from __future__ import annotations

import urllib.request

from prometheus_client.parser import text_string_to_metric_families

from etcd_compute.config import deep_merge
from tests.compute.helpers import claim_and_send, make_spec, wait_state
from tests.support import wait_for
from tools.local_services import free_port


def scrape(port: int) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5).read().decode()
    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for family in text_string_to_metric_families(text) for s in family.samples}


def leader(port: int) -> float:
    return scrape(port)[("etcd_compute_controller_leader", ())]


def test_leader_standby_and_a_reschedule_counted(start_controller, start_compute, schedule_config,
                                                 compute_config, host_config, store, placement):
    ports = free_port(), free_port()
    for index, port in enumerate(ports):
        start_controller(deep_merge(schedule_config, {
            "scheduler": {"metrics_listen": f"127.0.0.1:{port}"}}), name=f"controller{index}")
    broken = deep_merge(compute_config, {"driver": {"fake": {"fail_builds": True}}})
    healthy = host_config("healthy-host")
    start_compute(broken, name="broken")
    start_compute(healthy, name="healthy")
    a, b = broken["compute"]["uuid"], healthy["compute"]["uuid"]
    for rp in (a, b):
        wait_for(lambda rp=rp: store.get(store.keys.alive(rp)), 30, what="heartbeats")
    # Exactly one leads; both serve.
    wait_for(lambda: sorted(leader(port) for port in ports) == [0.0, 1.0], 20, 0.2,
             what="one leader and one standby")
    lead = next(port for port in ports if leader(port) == 1.0)

    spec = make_spec(a)
    spec["alternates"] = [{"host": b, "allocations": {b: {"resources": spec["resources"]}}}]
    claim_and_send(store, placement, spec)
    assert wait_state(store, spec["uuid"], "ACTIVE")["host"] == b

    samples = scrape(lead)
    moved = ("etcd_compute_controller_actions_total",
             (("action", "reschedule"), ("result", "moved")))
    assert samples[moved] == 1
    assert samples[("etcd_compute_controller_actions_total",
                    (("action", "reschedule"), ("result", "failed")))] == 0
    assert samples[("etcd_compute_controller_events_total",
                    (("kind", "record"), ("result", "ok")))] >= 1
    assert samples[("etcd_compute_controller_events_total",
                    (("kind", "record"), ("result", "error")))] == 0
    assert samples[("etcd_compute_backend_errors_total", (("service", "etcd"),))] == 0
    # The standby acted on nothing.
    standby = scrape(next(port for port in ports if port != lead))
    assert standby[moved] == 0
    assert standby[("etcd_compute_controller_events_total",
                    (("kind", "record"), ("result", "ok")))] == 0

"""The compute daemon's metrics, as a real Prometheus (Debian's) scrapes them, and as served.

compute.py runs as a real process (fake driver) against the real etcd and
Placement; Prometheus runs as a child process on a free port with its own
config and storage, scraping every second, and is stopped by pid.
"""

from __future__ import annotations

import socket
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families

from etcd_compute.config import deep_merge
from etcd_compute.errors import ServiceUnavailable
from tests.compute.helpers import builds_log, claim_and_send, make_spec, wait_state
from tests.support import run_cli, unavailable, wait_for
from tools.local_services import PrometheusServer, free_port

ROOM = {"VCPU": {"total": 16}, "MEMORY_MB": {"total": 4096}, "DISK_GB": {"total": 64}}


def with_metrics(config: dict[str, Any], port: int, **compute: Any) -> dict[str, Any]:
    return deep_merge(config, {"compute": {"metrics_listen": f"127.0.0.1:{port}",
                                           "inventory": ROOM, **compute}})


def scrape(port: int) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """Every sample the daemon serves: {(name, sorted labels): value}."""
    text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5).read().decode()
    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for family in text_string_to_metric_families(text) for s in family.samples}


def value(samples: dict, name: str, **labels: str) -> float | None:
    return samples.get((name, tuple(sorted(labels.items()))))


@pytest.fixture
def prometheus(tmp_path: Path) -> Iterator[Any]:
    """Start Debian's prometheus scraping `targets` every second; stopped by pid after."""
    started: list[PrometheusServer] = []

    def start(targets: dict[str, list[str]]) -> PrometheusServer:
        try:
            server = PrometheusServer.create(tmp_path / "prometheus", targets, interval=1.0)
            started.append(server)
            return server.start()
        except ServiceUnavailable as exc:
            unavailable(str(exc))
            raise

    yield start
    for server in started:
        server.stop()


def test_prometheus_counts_exactly_the_builds_done(prometheus, start_compute, compute_config,
                                                  store, placement):
    port, n = free_port(), 6
    config = with_metrics(compute_config, port, inventory_refresh_seconds=1)
    rp = config["compute"]["uuid"]
    compute = start_compute(config)
    wait_for(lambda: store.get(store.keys.alive(rp)), 30, what="compute heartbeat")
    server = prometheus({"compute": [f"127.0.0.1:{port}"]})
    wait_for(lambda: server.value('up{job="compute"}') == 1, 15, 0.2,
             what="Prometheus to scrape the compute")

    specs = [make_spec(rp) for _ in range(n)]
    for spec in specs:
        claim_and_send(store, placement, spec)
    for spec in specs:
        wait_state(store, spec["uuid"], "ACTIVE")
    done = len(builds_log(config))  # what the driver actually built
    assert done == n, compute.log()

    counted = wait_for(
        lambda: (lambda v: v if v == done else None)(
            server.value('etcd_compute_builds_total{job="compute",result="success"}')),
        15, 0.2, what=f"Prometheus to count {done} builds")
    assert counted == done
    assert server.value('sum(etcd_compute_builds_total{result!="success"})') == 0
    assert server.value('etcd_compute_build_duration_seconds_count{result="success"}') == done
    assert server.value("sum(etcd_compute_job_failures_total)") == 0
    # One watch event per spec, each handled once.
    assert server.value("etcd_compute_watch_lag_seconds_count") == n
    assert server.value("etcd_compute_request_lag_seconds_count") == n
    # Instances by state and free capacity follow soon after (records counted after jobs
    # end; capacity every inventory_refresh_seconds).
    wait_for(lambda: server.value('etcd_compute_instances{state="ACTIVE"}') == n, 15, 0.2,
             what="instances ACTIVE in Prometheus")
    wait_for(lambda: server.value('etcd_compute_capacity_free{resource_class="VCPU"}')
             == 16 - n, 15, 0.2, what="free VCPU in Prometheus")
    assert server.value('etcd_compute_capacity{resource_class="VCPU"}') == 16
    assert server.value("sum(etcd_compute_jobs_in_flight)") == 0
    assert server.value('etcd_compute_backend_errors_total{service="etcd"}') == 0


def test_failures_by_reason_and_jobs_in_flight_as_served(start_compute, compute_config, store,
                                                         placement):
    port = free_port()
    # Every build that gets past the image check sleeps 4 s: killed at 1.5 s.
    config = deep_merge(with_metrics(compute_config, port, job_timeout_seconds=1.5),
                        {"driver": {"fake": {"build_seconds": 4}}})
    rp = config["compute"]["uuid"]
    compute = start_compute(config)
    wait_for(lambda: store.get(store.keys.alive(rp)), 30, what="compute heartbeat")
    slow, bad = make_spec(rp), make_spec(rp, image="file:///no/such/image")
    claim_and_send(store, placement, slow)
    wait_state(store, slow["uuid"], "BUILDING")
    in_flight = wait_for(lambda: value(scrape(port), "etcd_compute_jobs_in_flight",
                                       kind="build") == 1, 10, what="a build in flight")
    assert in_flight
    claim_and_send(store, placement, bad)
    wait_state(store, bad["uuid"], "ERROR")
    wait_state(store, slow["uuid"], "ERROR", timeout=20)
    samples = wait_for(lambda: (lambda s: s if value(
        s, "etcd_compute_job_failures_total", kind="build", reason="timeout") else None)(
        scrape(port)), 10, what="the timeout counted")
    assert value(samples, "etcd_compute_job_failures_total", kind="build",
                 reason="request") == 1, compute.log()
    assert value(samples, "etcd_compute_job_failures_total", kind="build",
                 reason="timeout") == 1
    assert value(samples, "etcd_compute_builds_total", result="failure") == 2
    assert value(samples, "etcd_compute_builds_total", result="success") == 0
    assert value(samples, "etcd_compute_jobs_in_flight", kind="build") == 0
    assert value(samples, "etcd_compute_build_duration_seconds_count", result="failure") == 2
    # Labels are fixed sets: no instance uuid anywhere.
    assert not [key for key in samples if any(slow["uuid"] in v or bad["uuid"] in v
                                              for _, v in key[1])]


def test_a_refused_or_taken_address_stops_the_daemon_with_one_line(compute_config, write_yaml):
    wildcard = write_yaml("wildcard.yaml", deep_merge(compute_config, {
        "compute": {"metrics_listen": "0.0.0.0:9180"}}))
    for argv in (["--config", str(wildcard)], ["--config", str(wildcard), "--check"]):
        run = run_cli("compute.py", *argv, timeout=60)
        assert run.code == 2
        assert run.stderr.count("\n") == 1 and "Traceback" not in run.stderr
        assert "compute.metrics_listen '0.0.0.0:9180': 0.0.0.0 listens on every address" \
            in run.stderr

    served = write_yaml("served.yaml", with_metrics(compute_config, 9180))
    check = run_cli("compute.py", "--config", str(served), "--check", timeout=60)
    assert check.code == 0, check.stderr
    assert check.stdout.splitlines()[-2] == "metrics: ok (http://127.0.0.1:9180/metrics)"

    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        busy = write_yaml("busy.yaml", with_metrics(compute_config, port))
        started = time.monotonic()
        run = run_cli("compute.py", "--config", str(busy), timeout=60)
    assert run.code == 2, run.stderr
    assert run.stderr.strip() == (f"compute.py: error: compute.metrics_listen 127.0.0.1:{port}: "
                                  "cannot listen (Address already in use)")
    assert time.monotonic() - started < 30

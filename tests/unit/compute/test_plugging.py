"""A build on Neutron ports waits for network-vif-plugged, on the machine's main loop,
against in-memory etcd, Placement and pool: ACTIVE once each port is said up (events that
came first count), the failed-build path for a failed event or a timeout when fatal,
ACTIVE with a warning when not, a destroy during the wait, and no wait without ports."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from etcd_compute.compute import worker
from etcd_compute.compute.plugging import PlugWaits
from etcd_compute.instances import external_events
from tests.unit.compute.test_machine import Host

PORTS = ["11111111-1111-4111-8111-111111111111", "22222222-2222-4222-8222-222222222222"]
TIMEOUT = 300


def neutron_host(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, fatal: bool = True,
                 ports: list[str] = PORTS) -> Host:
    """A host whose builds plug `ports` (what the worker returns on Neutron)."""
    host = Host(tmp_path)
    real = worker.build
    monkeypatch.setattr(worker, "build", lambda spec: {**real(spec), "ports": list(ports)})
    machine = host.machine
    machine.plugging = PlugWaits(host.store, machine.jobs, host.loop.post, machine.later,
                                 machine.on_job_done, {"vif_plugging_timeout": TIMEOUT,
                                                       "vif_plugging_is_fatal": fatal})
    return host


def neutron_says(host: Host, uuid: str, *events: tuple[str, str], rp: str | None = None,
                 deliver: bool = True) -> None:
    """What the compute API writes (port, status), and the watch hands over."""
    rp = rp or host.rp
    assert external_events.hand_to_host(host.store, rp, uuid, [
        {"name": "network-vif-plugged", "status": status, "tag": port, "at": time.time()}
        for port, status in events], host.store.grant(3600))
    if deliver:
        entry = host.store.get(host.keys.external_events(rp, uuid))
        host.machine.plugging.on_events(rp, uuid, entry.value)
    host.settle()


def time_passes(host: Host) -> None:
    """The wait's timer fires."""
    [(seconds, post, args)] = host.delayed
    assert seconds == TIMEOUT
    host.delayed.clear()
    post(*args)
    host.settle()


def nothing_claimed(host: Host, uuid: str) -> bool:
    return host.placement.get_allocations(uuid)["allocations"] == {}


def built_and_waiting(host: Host) -> str:
    spec = host.spec()
    host.send(spec)
    host.settle()
    assert host.record(spec["uuid"])["state"] == "BUILDING"
    assert spec["uuid"] in host.driver_holds()
    return spec["uuid"]


def test_active_only_once_neutron_says_every_port_is_plugged(tmp_path, monkeypatch):
    host = neutron_host(tmp_path, monkeypatch)
    uuid = built_and_waiting(host)
    neutron_says(host, uuid, (PORTS[0], "completed"))
    assert host.record(uuid)["state"] == "BUILDING"
    neutron_says(host, uuid, ("33333333-3333-4333-8333-333333333333", "completed"))
    assert host.record(uuid)["state"] == "BUILDING"  # not one of its ports
    neutron_says(host, uuid, (PORTS[1], "completed"))
    assert host.record(uuid)["state"] == "ACTIVE"
    assert host.machine.jobs == {} and host.machine.plugging.waits == {}
    time_passes(host)  # the timer of a wait that ended does nothing
    assert host.record(uuid)["state"] == "ACTIVE"


def test_events_that_came_before_the_wait_count(tmp_path, monkeypatch):
    host = neutron_host(tmp_path, monkeypatch)
    spec = host.spec()
    host.send(spec)
    host.until_jobs("build")  # the guest is being built: Neutron may already speak
    neutron_says(host, spec["uuid"], (PORTS[0], "completed"), (PORTS[1], "completed"),
                 deliver=False)
    host.settle()
    assert host.record(spec["uuid"])["state"] == "ACTIVE"


def test_a_failed_port_fails_the_build_leaving_nothing(tmp_path, monkeypatch):
    host = neutron_host(tmp_path, monkeypatch)
    uuid = built_and_waiting(host)
    neutron_says(host, uuid, (PORTS[0], "completed"), (PORTS[1], "failed"))
    record = host.record(uuid)
    assert record["state"] == "ERROR"
    assert record["error"] == f"Neutron says port(s) {PORTS[1]} failed to plug " \
                              "(network-vif-plugged failed)"
    assert host.driver_holds() == set() and nothing_claimed(host, uuid)
    assert host.failures() == 1  # the host's fault, not the request's


def test_ports_not_up_in_time_fail_the_build_when_fatal(tmp_path, monkeypatch):
    host = neutron_host(tmp_path, monkeypatch)
    uuid = built_and_waiting(host)
    neutron_says(host, uuid, (PORTS[0], "completed"))
    time_passes(host)
    record = host.record(uuid)
    assert record["state"] == "ERROR" and "\n" not in record["error"]
    assert record["error"] == f"port(s) {PORTS[1]} not up within {TIMEOUT} s " \
                              "(no network-vif-plugged from Neutron)"
    assert host.driver_holds() == set() and nothing_claimed(host, uuid)


def test_not_fatal_the_guest_runs_anyway_with_a_warning(tmp_path, monkeypatch, caplog):
    host = neutron_host(tmp_path, monkeypatch, fatal=False)
    uuid = built_and_waiting(host)
    time_passes(host)
    assert host.record(uuid)["state"] == "ACTIVE"
    assert "running anyway (vif_plugging_is_fatal is false)" in caplog.text
    other = built_and_waiting(host)
    neutron_says(host, other, (PORTS[0], "failed"), (PORTS[1], "completed"))
    assert host.record(other)["state"] == "ACTIVE"


def test_a_destroy_during_the_wait_ends_deleted_with_nothing_left(tmp_path, monkeypatch):
    host = neutron_host(tmp_path, monkeypatch)
    uuid = built_and_waiting(host)
    neutron_says(host, uuid, (PORTS[0], "completed"))
    host.destroy(host.spec() | {"uuid": uuid})
    host.settle()
    assert host.record(uuid)["state"] == "DELETED"
    assert host.driver_holds() == set() and nothing_claimed(host, uuid)
    assert host.store.get(host.keys.external_events(host.rp, uuid)) is None
    assert host.machine.plugging.waits == {}


def test_an_event_under_another_hosts_key_does_not_count(tmp_path, monkeypatch):
    host = neutron_host(tmp_path, monkeypatch)
    uuid = built_and_waiting(host)
    elsewhere = "44444444-4444-4444-8444-444444444444"
    host.store.put_raw(host.keys.record(elsewhere, uuid), "{}")  # a record there to write by
    neutron_says(host, uuid, (PORTS[0], "completed"), (PORTS[1], "completed"),
                 rp=elsewhere)
    assert host.record(uuid)["state"] == "BUILDING"


def test_a_lost_watch_history_reads_the_events_again(tmp_path, monkeypatch):
    host = neutron_host(tmp_path, monkeypatch)
    uuid = built_and_waiting(host)
    neutron_says(host, uuid, (PORTS[0], "completed"), (PORTS[1], "completed"),
                 deliver=False)
    assert host.record(uuid)["state"] == "BUILDING"  # the watch's events were lost
    read_at = host.store.revision
    revision = host.machine.plugging.resync(host.keys.external_events_prefix(host.rp))
    host.settle()
    assert revision == read_at and host.record(uuid)["state"] == "ACTIVE"


def test_a_build_without_ports_never_waits(tmp_path, monkeypatch):
    host = neutron_host(tmp_path, monkeypatch, ports=[])
    spec = host.spec()
    host.send(spec)
    host.settle()
    assert host.record(spec["uuid"])["state"] == "ACTIVE" and host.delayed == []

"""Power state sync (compute/power.py): what the hypervisor reports moves a record only when
it is not our own doing and not stale."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest

from etcd_compute import events
from etcd_compute.compute.power import PowerSync
from etcd_compute.drivers import PowerReport, PowerWatch
from etcd_compute.instances import host as host_txn
from tests.unit.compute.test_actions import active, ask
from tests.unit.compute.test_machine import Host


class FakeWatch(PowerWatch):
    """Records what it is asked; the test plays the hypervisor's reports."""

    def __init__(self) -> None:
        self.checks: list[str | None] = []
        self.report: PowerReport | None = None

    def start(self, report: PowerReport) -> None:
        self.report = report

    def check(self, uuid: str | None = None) -> None:
        self.checks.append(uuid)

    def stop(self) -> None:
        pass


@pytest.fixture
def host(tmp_path: Path) -> Host:
    return Host(tmp_path)


@pytest.fixture
def sync(host: Host) -> tuple[PowerSync, FakeWatch]:
    machine = host.machine
    power, watch = PowerSync(machine.store, machine.hosts, machine.consoles, machine.gate,
                             busy=lambda uuid: uuid in machine.jobs,
                             settled_at=lambda uuid: machine.settled.get(uuid, 0.0)), FakeWatch()
    machine.power_check = power.check
    power.start(watch, host.loop.post)
    return power, watch


def report(sync: tuple[PowerSync, FakeWatch], host: Host, uuid: str, running: bool,
           why: str = "the guest shut down", crashed: bool = False,
           at: float | None = None) -> None:
    """The watch's thread reports; the main loop handles it."""
    _power, watch = sync
    assert watch.report is not None
    watch.report(uuid, running, why, crashed, time.monotonic() if at is None else at)
    host.loop.drain()  # the main loop handles it (no pool job runs meanwhile)


def last_event(host: Host, uuid: str) -> dict[str, Any]:
    return events.read(host.store, host.rp, uuid)[-1]


def test_a_guest_that_stopped_on_its_own_shows_shutoff_and_started_again_active(host, sync):
    spec = active(host)
    report(sync, host, spec["uuid"], False)
    assert host.record(spec["uuid"])["state"] == "SHUTOFF"
    event = last_event(host, spec["uuid"])
    assert (event["action"], event["by"], event["result"], event["detail"]) == (
        "power-off", "hypervisor", "success", "the guest shut down")
    assert spec["uuid"] not in host.consoles.followed
    report(sync, host, spec["uuid"], True, "started outside etcd-compute")
    assert host.record(spec["uuid"])["state"] == "ACTIVE"
    assert last_event(host, spec["uuid"])["action"] == "power-on"


def test_a_crash_is_an_error_event(host, sync):
    spec = active(host)
    report(sync, host, spec["uuid"], False, "the guest crashed", crashed=True)
    event = last_event(host, spec["uuid"])
    assert host.record(spec["uuid"])["state"] == "SHUTOFF"
    assert (event["result"], event["error"]) == ("error", "the guest crashed")


def test_a_report_that_agrees_with_the_record_writes_nothing(host, sync):
    spec = active(host)
    writes = len(host.store.committed)
    report(sync, host, spec["uuid"], True, "found running")
    assert len(host.store.committed) == writes


def test_our_own_stop_is_not_taken_for_an_outside_one(host, sync):
    spec = active(host)
    ask(host, spec, "reboot")  # its job powers the guest off and on again
    report(sync, host, spec["uuid"], False)  # seen while the job runs: ignored
    assert host.record(spec["uuid"])["state"] == "REBOOTING"
    _power, watch = sync
    watch.checks.clear()
    host.settle()  # the job ends ...
    assert watch.checks == [spec["uuid"]]  # ... and the guest is looked at again
    assert host.record(spec["uuid"])["state"] == "ACTIVE"


def test_a_report_taken_before_our_last_job_ended_is_looked_at_again(host, sync):
    spec = active(host)
    seen_at = time.monotonic()  # the watch looked ...
    ask(host, spec, "reboot")
    host.settle()  # ... then our reboot ran and ended: what it saw is stale
    _power, watch = sync
    watch.checks.clear()
    report(sync, host, spec["uuid"], False, at=seen_at)
    assert host.record(spec["uuid"])["state"] == "ACTIVE"
    assert watch.checks == [spec["uuid"]]
    report(sync, host, spec["uuid"], False)  # a fresh look: it is off
    assert host.record(spec["uuid"])["state"] == "SHUTOFF"


def test_a_report_from_before_the_last_reconcile_is_stale(host, sync):
    spec = active(host)
    seen_at = time.monotonic()
    power, _watch = sync
    power.reconciled()  # it powered the guest on again
    report(sync, host, spec["uuid"], False, at=seen_at)
    assert host.record(spec["uuid"])["state"] == "ACTIVE"


def test_nothing_is_acted_on_while_fenced(host, sync):
    spec = active(host)
    host.machine.gate.closed = True
    report(sync, host, spec["uuid"], False, "powered off outside etcd-compute")
    assert host.record(spec["uuid"])["state"] == "ACTIVE"


def test_a_guest_that_is_no_instance_of_ours_is_left_alone(host, sync):
    writes = len(host.store.committed)
    report(sync, host, "0b7e4f1e-9a0c-4a51-8f0e-5d2c3b4a6e7f", False)
    assert len(host.store.committed) == writes


@pytest.mark.parametrize("state", ["DELETING", "ERROR", "SCHEDULED", "SUSPENDED"])
def test_only_active_shutoff_and_paused_records_follow_the_hypervisor(host, sync, state):
    spec = active(host)
    record = host.record(spec["uuid"])
    host.store.put("instance_record", host.keys.record(host.rp, spec["uuid"]),
                   {**record, "state": state})
    report(sync, host, spec["uuid"], False)
    assert host.record(spec["uuid"])["state"] == state


def paused(host: Host) -> dict[str, Any]:
    spec = active(host)
    record = host.record(spec["uuid"])
    host.store.put("instance_record", host.keys.record(host.rp, spec["uuid"]),
                   {**record, "state": "PAUSED"})
    return spec


def test_a_paused_guest_found_running_stays_paused(host, sync):
    # libvirt's PAUSED domain is active: the watch reports it running, as it is.
    spec = paused(host)
    writes = len(host.store.committed)
    report(sync, host, spec["uuid"], True, "found running")
    assert host.record(spec["uuid"])["state"] == "PAUSED"
    assert len(host.store.committed) == writes


def test_a_paused_guest_that_stopped_shows_shutoff_its_memory_gone(host, sync):
    # Powered off behind our back, crashed, or its host restarted: Nova's sync stops a
    # paused server found shut down; unpause could not bring it back.
    spec = paused(host)
    report(sync, host, spec["uuid"], False, "powered off outside etcd-compute")
    assert host.record(spec["uuid"])["state"] == "SHUTOFF"
    event = last_event(host, spec["uuid"])
    assert (event["action"], event["by"], event["detail"]) == (
        "power-off", "hypervisor", "powered off outside etcd-compute")
    assert spec["uuid"] not in host.consoles.followed


def test_a_lost_race_looks_again(host, sync, monkeypatch):
    spec = active(host)
    monkeypatch.setattr(host_txn, "power_changed", lambda *args, **kwargs: None)
    _power, watch = sync
    watch.checks.clear()
    report(sync, host, spec["uuid"], False)
    assert watch.checks == [spec["uuid"]]

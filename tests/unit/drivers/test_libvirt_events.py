"""The libvirt power watch's own logic (drivers/libvirt_events.py) with a stand-in
connection: what an event means, which guests it reports, and that it reports each one as
it is when looked at. Real libvirt events: tests/virt/test_lifecycle_vm.py."""

from __future__ import annotations

import libvirt
import pytest

from etcd_compute.drivers import libvirt_events
from etcd_compute.drivers.libvirt_events import LibvirtPowerWatch, describe

OURS, ALSO_OURS, FOREIGN = ("0b7e4f1e-9a0c-4a51-8f0e-5d2c3b4a6e7f",
                            "1b7e4f1e-9a0c-4a51-8f0e-5d2c3b4a6e7f",
                            "2b7e4f1e-9a0c-4a51-8f0e-5d2c3b4a6e7f")


@pytest.mark.parametrize(("event", "detail", "why", "crashed"), [
    (libvirt.VIR_DOMAIN_EVENT_STOPPED, libvirt.VIR_DOMAIN_EVENT_STOPPED_SHUTDOWN,
     "the guest shut down", False),
    (libvirt.VIR_DOMAIN_EVENT_STOPPED, libvirt.VIR_DOMAIN_EVENT_STOPPED_DESTROYED,
     "powered off outside etcd-compute", False),
    (libvirt.VIR_DOMAIN_EVENT_STOPPED, libvirt.VIR_DOMAIN_EVENT_STOPPED_CRASHED,
     "the guest crashed", True),
    (libvirt.VIR_DOMAIN_EVENT_CRASHED, 0, "the guest crashed", True),
    (libvirt.VIR_DOMAIN_EVENT_SHUTDOWN, libvirt.VIR_DOMAIN_EVENT_SHUTDOWN_GUEST,
     "the guest shut down", False),
    (libvirt.VIR_DOMAIN_EVENT_SHUTDOWN, libvirt.VIR_DOMAIN_EVENT_SHUTDOWN_HOST,
     "powered off outside etcd-compute", False),
    (libvirt.VIR_DOMAIN_EVENT_STARTED, 0, "started outside etcd-compute", False),
])
def test_what_an_event_means(event, detail, why, crashed):
    assert describe(event, detail) == (why, crashed)


class Domain:
    def __init__(self, name: str, running: bool, ours: bool = True):
        self._name, self.running, self.ours = name, running, ours

    def name(self) -> str:
        return self._name

    def isActive(self) -> int:  # noqa: N802 (libvirt's name)
        return int(self.running)


class Connection:
    def __init__(self, *domains: Domain):
        self.domains = {d.name(): d for d in domains}

    def lookupByName(self, name: str) -> Domain:  # noqa: N802
        if name not in self.domains:
            error = libvirt.libvirtError("no domain")
            error.get_error_code = lambda: libvirt.VIR_ERR_NO_DOMAIN
            raise error
        return self.domains[name]

    def listAllDomains(self) -> list[Domain]:  # noqa: N802
        return list(self.domains.values())


@pytest.fixture
def watch(monkeypatch):
    watch = LibvirtPowerWatch("qemu:///system")
    reports: list[tuple] = []
    watch.report = lambda *report: reports.append(report)
    monkeypatch.setattr(libvirt_events, "is_ours", lambda domain: domain.ours)
    return watch, reports


def test_events_are_queued_by_name_and_definitions_are_ignored(watch):
    power, _reports = watch
    power._on_event(None, Domain(OURS, False), libvirt.VIR_DOMAIN_EVENT_STOPPED,
                    libvirt.VIR_DOMAIN_EVENT_STOPPED_DESTROYED, None)
    power._on_event(None, Domain(OURS, False), libvirt.VIR_DOMAIN_EVENT_DEFINED, 0, None)
    power._on_event(None, Domain("not-a-uuid", False), libvirt.VIR_DOMAIN_EVENT_STOPPED, 0,
                    None)
    assert list(power.queue.queue) == [(OURS, "powered off outside etcd-compute", False)]


def test_each_guest_is_reported_once_as_it_is_now_with_its_last_reason(watch):
    power, reports = watch
    power.connection = Connection(Domain(OURS, True), Domain(ALSO_OURS, False),
                                  Domain(FOREIGN, False, ours=False))
    power._look([(OURS, "the guest shut down", False), (OURS, None, False),
                 (ALSO_OURS, "the guest crashed", True), (FOREIGN, "x", False),
                 ("3b7e4f1e-9a0c-4a51-8f0e-5d2c3b4a6e7f", "gone", False)])
    # OURS runs again by now (a stale "shut down" is reported as running); the foreign and
    # the removed domains are not reported.
    assert [(r[0], r[1], r[2], r[3]) for r in reports] == [
        (OURS, True, "the guest shut down", False),
        (ALSO_OURS, False, "the guest crashed", True)]


def test_a_check_of_everyone_reports_every_guest_of_ours(watch):
    power, reports = watch
    power.connection = Connection(Domain(OURS, True), Domain(FOREIGN, False, ours=False))
    power._look([("", None, False)])
    assert [(r[0], r[1], r[2]) for r in reports] == [(OURS, True, "found running")]


def test_an_outage_is_warned_once_and_a_lost_connection_again(monkeypatch, caplog):
    """libvirtd down: one warning, not one per retry; connected, then lost: one more."""
    watch = LibvirtPowerWatch("qemu:///system", retry_seconds=0)
    # Three failed connections, one that works (and is lost on its first wait), three more.
    outcomes = ["down"] * 3 + ["up"] + ["down"] * 3
    attempts: list[str] = []

    def error(message: str) -> libvirt.libvirtError:
        exc = libvirt.libvirtError(message)
        exc.get_error_message = lambda: message
        return exc

    class Alive:
        def isAlive(self) -> int:  # noqa: N802 (libvirt's name)
            return 1

    def connect():
        attempts.append(outcomes[len(attempts)])
        if len(attempts) == len(outcomes):
            watch.stopping.set()
        if attempts[-1] == "up":
            return Alive()
        raise error("Failed to connect socket")

    def lost(timeout):
        raise error("connection lost")

    monkeypatch.setattr(watch, "_connect", connect)
    monkeypatch.setattr(watch.queue, "get", lost)
    with caplog.at_level("WARNING", logger=libvirt_events.LOG.name):
        watch._run()
    assert attempts == outcomes
    assert [r.getMessage() for r in caplog.records if r.levelname == "WARNING"] == [
        "power watch: Failed to connect socket; connecting again every 0 s",
        "power watch: connection lost; connecting again every 0 s"]

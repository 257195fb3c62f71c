"""Guests starting and stopping, from libvirt's lifecycle events (not polling).

libvirt calls back from its event loop (a thread of ours running
`virEventRunDefaultImpl`) for every domain lifecycle event on our connection.
The callback only queues the domain's name and what happened: calling into
libvirt from it could stall the loop. The watch's own thread then looks each
guest up and reports whether it runs *now*, with the time it looked (so the
daemon can tell a report that predates its own action from a fresh one), and
reconnects, then reports every guest of ours again, when libvirtd goes away.
The daemon's main loop decides what a report means (`compute/power.py`).
"""

from __future__ import annotations

import logging
import queue
import threading
import time

import libvirt

from etcd_compute.drivers.base import PowerReport, PowerWatch
from etcd_compute.keys import UUID
from etcd_compute.virt.domain import is_ours

LOG = logging.getLogger("etcd_compute.compute")

# Why a guest stopped, by the detail of libvirt's STOPPED event.
STOPPED_BECAUSE = {
    libvirt.VIR_DOMAIN_EVENT_STOPPED_SHUTDOWN: "the guest shut down",
    libvirt.VIR_DOMAIN_EVENT_STOPPED_DESTROYED: "powered off outside etcd-compute",
    libvirt.VIR_DOMAIN_EVENT_STOPPED_CRASHED: "the guest crashed",
    libvirt.VIR_DOMAIN_EVENT_STOPPED_MIGRATED: "migrated away",
    libvirt.VIR_DOMAIN_EVENT_STOPPED_SAVED: "saved",
    libvirt.VIR_DOMAIN_EVENT_STOPPED_FAILED: "the hypervisor failed",
    libvirt.VIR_DOMAIN_EVENT_STOPPED_FROM_SNAPSHOT: "reverted to a snapshot",
}
# Events that say nothing about whether it runs (a definition written or removed).
IGNORED = {libvirt.VIR_DOMAIN_EVENT_DEFINED, libvirt.VIR_DOMAIN_EVENT_UNDEFINED}
# One change often comes as several events (qemu's SHUTDOWN, then libvirt's STOPPED): wait
# this long after the first for the rest, so the last one gives the reason.
SETTLE_SECONDS = 0.3
_EVERYONE = ""

_loop_lock = threading.Lock()
_loop_started = False


def ensure_event_loop() -> None:
    """libvirt's default event loop, once per process, in a thread of its own (it must be
    registered before the connection that wants events is opened)."""
    global _loop_started
    with _loop_lock:
        if _loop_started:
            return
        libvirt.virEventRegisterDefaultImpl()
        threading.Thread(target=_run_loop, name="libvirt-events", daemon=True).start()
        _loop_started = True


def _run_loop() -> None:
    while True:
        if libvirt.virEventRunDefaultImpl() < 0:
            time.sleep(0.1)


def describe(event: int, detail: int) -> tuple[str, bool]:
    """(why, crashed) for a lifecycle event."""
    if event == libvirt.VIR_DOMAIN_EVENT_STOPPED:
        return (STOPPED_BECAUSE.get(detail, "stopped"),
                detail == libvirt.VIR_DOMAIN_EVENT_STOPPED_CRASHED)
    if event == libvirt.VIR_DOMAIN_EVENT_CRASHED:
        return "the guest crashed", True
    if event == libvirt.VIR_DOMAIN_EVENT_SHUTDOWN:
        if detail == libvirt.VIR_DOMAIN_EVENT_SHUTDOWN_HOST:  # a signal to qemu, as virsh's
            return "powered off outside etcd-compute", False
        return "the guest shut down", False
    if event == libvirt.VIR_DOMAIN_EVENT_STARTED:
        return "started outside etcd-compute", False
    return "its state changed", False


class LibvirtPowerWatch(PowerWatch):
    def __init__(self, uri: str, retry_seconds: float = 1.0):
        self.uri = uri
        self.retry_seconds = retry_seconds
        # (uuid or _EVERYONE, why or None for a check, crashed)
        self.queue: queue.Queue[tuple[str, str | None, bool]] = queue.Queue()
        self.stopping = threading.Event()
        self.report: PowerReport | None = None
        self.connection: libvirt.virConnect | None = None
        # Connecting failed last time (said once per outage).
        self.failing = False

    def start(self, report: PowerReport) -> None:
        self.report = report
        ensure_event_loop()
        threading.Thread(target=self._run, name="power-watch", daemon=True).start()

    def check(self, uuid: str | None = None) -> None:
        self.queue.put((uuid or _EVERYONE, None, False))

    def stop(self) -> None:
        self.stopping.set()
        self.queue.put((_EVERYONE, None, False))

    # -- libvirt's thread ---------------------------------------------------------------

    def _on_event(self, _connection: libvirt.virConnect, domain: libvirt.virDomain, event: int,
                  detail: int, _opaque: object) -> None:
        if event in IGNORED:
            return
        name = domain.name()
        if UUID.match(name):
            why, crashed = describe(event, detail)
            self.queue.put((name, why, crashed))

    # -- the watch's thread -------------------------------------------------------------

    def _connect(self) -> libvirt.virConnect:
        connection = libvirt.open(self.uri)
        connection.domainEventRegisterAny(None, libvirt.VIR_DOMAIN_EVENT_ID_LIFECYCLE,
                                          self._on_event, None)
        LOG.info("watching %s for guests that start or stop", self.uri)
        return connection

    def _run(self) -> None:
        while not self.stopping.is_set():
            try:
                if self.connection is None or not self.connection.isAlive():
                    self.connection = self._connect()
                    self.failing = False
                    self.check()  # events were missed while we had no connection
                try:
                    batch = [self.queue.get(timeout=1.0)]
                except queue.Empty:
                    continue
                self.stopping.wait(SETTLE_SECONDS)
                while not self.queue.empty():
                    batch.append(self.queue.get_nowait())
                if not self.stopping.is_set():
                    self._look(batch)
            except libvirt.libvirtError as exc:
                if self.connection is not None or not self.failing:
                    LOG.warning("power watch: %s; connecting again every %g s",
                                exc.get_error_message(), self.retry_seconds)
                self.connection, self.failing = None, True
                self.stopping.wait(self.retry_seconds)
            except Exception:  # noqa: BLE001 (the watch must outlive a surprise)
                LOG.exception("power watch failed; going on")
                self.stopping.wait(self.retry_seconds)
        if self.connection is not None:
            try:
                self.connection.close()
            except libvirt.libvirtError:
                pass

    def _look(self, batch: list[tuple[str, str | None, bool]]) -> None:
        """Report the guests of `batch` as they are now (the last why of each)."""
        assert self.connection is not None and self.report is not None
        observed_at = time.monotonic()
        latest: dict[str, tuple[str | None, bool]] = {}
        for name, why, crashed in batch:
            if why is not None or name not in latest:
                latest[name] = (why, crashed)
        if _EVERYONE in latest:
            del latest[_EVERYONE]
            for domain in self.connection.listAllDomains():
                if UUID.match(domain.name()) and domain.name() not in latest:
                    latest[domain.name()] = (None, False)
        for name, (why, crashed) in sorted(latest.items()):
            try:
                domain = self.connection.lookupByName(name)
                if not is_ours(domain):
                    continue
                running = bool(domain.isActive())
            except libvirt.libvirtError as exc:
                if exc.get_error_code() == libvirt.VIR_ERR_NO_DOMAIN:
                    continue  # removed (our destroy): nothing to report
                raise
            self.report(name, running, why or ("found running" if running else
                                              "found powered off"), crashed and not running,
                        observed_at)

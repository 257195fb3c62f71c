"""Power state sync: a guest that stops or starts behind our back shows in its record.

The hypervisor's watch (`drivers.load_power_watch`, libvirt's lifecycle
events) reports from a thread of its own; the service posts each report to
the main loop, which calls `observed`. A report is acted on only when it is
not our own doing and not stale:

- while a job of ours runs for the instance (our stop, reboot, resize...) its
  reports are ignored; when the job ends the machine asks again
  (`machine.power_check`), and only what is seen after that counts;
- a report taken before the instance's last job ended, or before the last
  reconcile (which powers on what should run), is stale: asked again;
- while the host is fenced nothing is acted on (the fence powered them off).

Then ACTIVE and not running -> SHUTOFF (the guest shut down, crashed, or was
powered off outside etcd-compute); SHUTOFF and running -> ACTIVE (started
outside); PAUSED and not running -> SHUTOFF (powered off or crashed, or its host
restarted: its memory is gone, as Nova's power sync stops a paused server found shut
down). A paused guest runs as far as this sync sees (libvirt's PAUSED domain is active):
a PAUSED record stays while its guest is there, and, as Nova's, an ACTIVE one whose guest
was paused outside etcd-compute, or a PAUSED one unpaused outside, is left as it is.
One transaction each (`instances.host.power_changed`), with an event.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable
from typing import Any

from etcd_compute.compute import metrics as compute_metrics
from etcd_compute.compute.consoles import Consoles
from etcd_compute.compute.fencing import Gate
from etcd_compute.drivers import PowerWatch
from etcd_compute.etcd import KeyValueStore
from etcd_compute.instances import host as host_txn
from etcd_compute.instances import records, states

LOG = logging.getLogger("etcd_compute.compute")


class PowerSync:
    """Built by the service from the instance machine's parts: `busy(uuid)` says whether a
    job of ours runs for it, `settled_at(uuid)` when its last job ended (time.monotonic());
    the service registers `check` as the machine's `power_check`."""

    def __init__(self, store: KeyValueStore, hosts: Iterable[str], consoles: Consoles,
                 gate: Gate, busy: Callable[[str], bool], settled_at: Callable[[str], float]):
        self.store, self.hosts, self.consoles, self.gate = store, list(hosts), consoles, gate
        self.busy, self.settled_at = busy, settled_at
        self.watch: PowerWatch | None = None
        # Reports taken before this (time.monotonic() of the last reconcile) are stale.
        self.since = 0.0

    def start(self, watch: PowerWatch | None,
              post: Callable[[Callable[..., None], tuple[Any, ...]], None]) -> None:
        self.watch = watch
        if watch is not None:
            watch.start(lambda *report: post(self.observed, report))

    def stop(self) -> None:
        if self.watch is not None:
            self.watch.stop()

    def check(self, uuid: str | None = None) -> None:
        """Ask how `uuid` (None: every guest) is powered now; the answer comes as a report."""
        if self.watch is not None:
            self.watch.check(uuid)

    def reconciled(self) -> None:
        """The reconcile put the guests right: what was seen before is stale."""
        self.since = time.monotonic()
        self.check()

    def observed(self, uuid: str, running: bool, why: str, crashed: bool,
                 observed_at: float) -> None:
        """The hypervisor saw `uuid`'s guest running or not at `observed_at`."""
        if self.gate.closed or self.busy(uuid):
            return  # fenced, or our own job: its end asks again
        if observed_at < max(self.since, self.settled_at(uuid)):
            self.check(uuid)  # seen before our last change to it: look again
            return
        for host in self.hosts:
            read = records.read_record(self.store, host, uuid)
            if read.record is not None:
                break
        else:
            return  # not an instance of ours (another host's, or gone)
        if (read.state, running) not in ((states.ACTIVE, False), (states.SHUTOFF, True),
                                         (states.PAUSED, False)):
            return  # the record says so already (or an action will decide)
        if host_txn.power_changed(self.store, read, running, why, crashed) is None:
            self.check(uuid)  # the record moved meanwhile: look again
            return
        state = states.ACTIVE if running else states.SHUTOFF
        compute_metrics.power_changed(state)
        logging.LoggerAdapter(LOG, {"instance": uuid}).warning("%s: %s", state, why)
        if running:
            self.consoles.follow(host, uuid)
        else:
            self.consoles.forget(uuid)

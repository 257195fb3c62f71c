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
outside). One transaction each (`instances.host.power_changed`), with an event.
"""

from __future__ import annotations

import logging
import time
from typing import TYPE_CHECKING

from etcd_compute.compute import metrics as compute_metrics
from etcd_compute.drivers import PowerWatch
from etcd_compute.instances import host as host_txn
from etcd_compute.instances import records, states

if TYPE_CHECKING:
    from etcd_compute.compute.machine import InstanceMachine, Post

LOG = logging.getLogger("etcd_compute.compute")


class PowerSync:
    def __init__(self, machine: InstanceMachine):
        self.machine = machine
        self.watch: PowerWatch | None = None
        # Reports taken before this (time.monotonic() of the last reconcile) are stale.
        self.since = 0.0

    def start(self, watch: PowerWatch | None, post: Post) -> None:
        self.watch = watch
        self.machine.power_check = self.check
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
        machine = self.machine
        if machine.gate.closed or uuid in machine.jobs:
            return  # fenced, or our own job: its end asks again
        if observed_at < max(self.since, machine.settled.get(uuid, 0.0)):
            self.check(uuid)  # seen before our last change to it: look again
            return
        for host in machine.hosts:
            read = records.read_record(machine.store, host, uuid)
            if read.record is not None:
                break
        else:
            return  # not an instance of ours (another host's, or gone)
        if (read.state, running) not in ((states.ACTIVE, False), (states.SHUTOFF, True)):
            return  # the record says so already (or an action will decide)
        if host_txn.power_changed(machine.store, read, running, why, crashed) is None:
            self.check(uuid)  # the record moved meanwhile: look again
            return
        state = states.ACTIVE if running else states.SHUTOFF
        compute_metrics.power_changed(state)
        logging.LoggerAdapter(LOG, {"instance": uuid}).warning("%s: %s", state, why)
        if running:
            machine.consoles.follow(host, uuid)
        else:
            machine.consoles.forget(uuid)

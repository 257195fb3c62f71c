"""How an instance's job ends on this host, written: built, failed, evacuated, destroyed.

The machine (`machine.py`) routes each finished job here, from its main loop:
a build that ran becomes ACTIVE (or SHUTOFF when asked powered off), its console
followed; a build that failed is handed to the controller for an alternate host
when it can be (alternates kept, a controller running), else ends in ERROR with
its claim freed (a failure that was the host's is counted in its stats); an
evacuated guest is handed over; a destroyed one ends DELETED with its claim freed.
Each is one transaction of `instances/host.py`; one that loses a race re-reads
the spec and acts on what is there now.
"""

from __future__ import annotations

import logging
import time
from typing import Any

from etcd_compute import claims
from etcd_compute.compute.parts import Machine
from etcd_compute.compute.pool import Job
from etcd_compute.hosts import record_build_failure
from etcd_compute.instances import host as host_txn
from etcd_compute.instances import states

LOG = logging.getLogger("etcd_compute.compute")

# What a drain may take away from this host (a stopped or suspended one is built again
# stopped, a paused one running: its memory stays behind either way).
EVACUABLE = (states.SCHEDULED, states.BUILDING, states.ACTIVE, states.SHUTOFF,
             states.SUSPENDED, states.PAUSED)


def instance_log(uuid: str) -> logging.LoggerAdapter:
    return logging.LoggerAdapter(LOG, {"instance": uuid})


class InstanceEnds:
    def __init__(self, machine: Machine):
        self.machine = machine
        self.store = machine.store
        self.placement = machine.placement

    def finish_build(self, job: Job, result: dict[str, Any]) -> None:
        uuid, spec = job.uuid, job.spec
        read = self.machine.read(spec["host"], uuid)
        if read.state != states.BUILDING:
            # A destroy got in between; it owns the instance now.
            self.machine.reread_later(spec)
            return
        ip = result.get("ip")
        stopped = bool(spec.get("stopped"))
        if host_txn.activate(self.store, read, ip, stopped) is None:
            self.machine.reread_later(spec)
            return
        instance_log(uuid).info("%s ip=%s (build took %.1f s)%s",
                                states.SHUTOFF if stopped else states.ACTIVE, ip,
                                time.monotonic() - job.started,
                                f"; Neutron ports {', '.join(result['ports'])}"
                                if result.get("ports") else "")
        if not stopped:
            self.machine.consoles.follow(spec["host"], uuid)

    def finish_failed_build(self, job: Job) -> None:
        uuid, spec, log = job.uuid, job.spec, instance_log(job.uuid)
        reason = job.reason or "build failed"
        if job.blame_host and self._can_hand_over(spec):
            read = self.machine.read(spec["host"], uuid)
            if read.state == states.BUILDING and \
                    host_txn.hand_over(self.store, spec, read, reason) is not None:
                record_build_failure(self.store, spec["host"])
                log.warning("build failed here (%s); handed to the controller for one of "
                            "%d alternate host(s)", reason, len(spec["alternates"]))
                return
        freed = claims.free_here(self.placement, uuid, spec["host"])  # never another's
        if host_txn.fail(self.store, spec, self.machine.read(spec["host"], uuid), reason) is None:
            self.machine.reread_later(spec)
            return
        if job.blame_host:
            record_build_failure(self.store, spec["host"])
        log.error("ERROR: %s (%s, nothing left)", reason,
                  "allocation freed" if freed else "no claim of this host's to free")

    def _can_hand_over(self, spec: dict[str, Any]) -> bool:
        """Alternates kept, owner ids to move the claim with, and a controller to do it
        (`schedule.py serve`; a host may not write another host's keys)."""
        return bool(spec.get("alternates")) and "project_id" in spec and \
            "user_id" in spec and self.store.get(self.store.keys.leader()) is not None

    def finish_evacuate(self, spec: dict[str, Any]) -> None:
        read = self.machine.read(spec["host"], spec["uuid"])
        if read.state not in EVACUABLE:
            return  # a destroy got in meanwhile: it owns the instance now
        reason = f"evacuated from {self.machine.hosts[spec['host']].name} (drain)"
        if host_txn.hand_over(self.store, spec, read, reason, evacuating=True) is None:
            self.machine.reread_later(spec)
            return
        instance_log(spec["uuid"]).warning("%s: handed to the controller", reason)

    def finish_destroy(self, spec: dict[str, Any]) -> None:
        uuid = spec["uuid"]
        self.machine.consoles.forget(uuid)
        claims.free_here(self.placement, uuid, spec["host"])  # never another host's claim
        host_txn.delete(self.store, spec, self.machine.read(spec["host"], uuid),
                         self.machine.settings["deleted_record_ttl"])
        instance_log(uuid).info("DELETED (allocation freed)")

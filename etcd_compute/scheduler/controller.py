"""The controller's decisions: what the operator's side does about what happened on hosts.

Runs inside `schedule.py serve` (see `serve.py`) with the operator's
privileges, as the elected leader only. Kept apart from the daemon (election,
watch, signals) so each decision is a plain call, unit-tested against an
in-memory store and Placement:

- `on_record(host, uuid)`: a record changed. RESCHEDULING (a build failed on
  its host, which may not write another host's keys) -> move it to the next
  live alternate the scheduler kept: the claim in one Placement call, then
  spec, record, location and membership in one etcd transaction; or ERROR
  with its claim freed when none will take it.
- `on_record_gone(host, uuid)`: a record expired or was removed -> forget the
  operator's keys of that instance (location, group member), which its host
  could not remove.
- `sweep()`: all of the above for everything, when we become leader (events
  before that were someone else's business, or nobody's).
"""

from __future__ import annotations

import logging

from etcd_compute import claims, instances, messages
from etcd_compute.errors import EtcdComputeError, InvalidMessage
from etcd_compute.etcd import KeyValueStore
from etcd_compute.keys import RECORDS
from etcd_compute.placement import PlacementClient
from etcd_compute.scheduler import metrics as scheduler_metrics

LOG = logging.getLogger("etcd_compute.controller")


def instance_log(uuid: str) -> logging.LoggerAdapter:
    return logging.LoggerAdapter(LOG, {"instance": uuid})


class Controller:
    def __init__(self, store: KeyValueStore, placement: PlacementClient):
        self.store = store
        self.keys = store.keys
        self.placement = placement

    # --- records --------------------------------------------------------------------------

    def on_record(self, host: str, uuid: str) -> None:
        read = instances.read_record(self.store, host, uuid)
        if read.state == instances.RESCHEDULING:
            self.reschedule(host, uuid, read)

    def reschedule(self, host: str, uuid: str, read: instances.RecordRead) -> str | None:
        """Move a build that failed on `host` to a live alternate; the new host, or None."""
        log = instance_log(uuid)
        entry = self.store.get(self.keys.spec(host, uuid))
        try:
            spec = messages.decode(messages.INSTANCE_SPEC, entry.value) if entry else None
        except InvalidMessage:
            spec = None
        reason = (read.record or {}).get("error") or "build failed"
        if spec is None or spec["action"] != "build":
            return None  # a destroy (or garbage) got in: its host deals with it
        alternates = spec.get("alternates") or []
        for index, alternate in enumerate(alternates):
            target = alternate["host"]
            if self.store.get(self.keys.alive(target)) is None:
                log.info("alternate %s has no heartbeat; skipping it", target)
                continue
            try:
                claims.move(self.placement, uuid, alternate["allocations"], spec["project_id"],
                            spec["user_id"])
            except EtcdComputeError as exc:
                log.info("alternate %s refused the claim (%s); trying the next", target, exc)
                continue
            if instances.move(self.store, spec, read, target, alternate["allocations"],
                              alternates[index + 1:]) is None:
                scheduler_metrics.rescheduled("conflict")
                return None  # it changed meanwhile (a destroy): the next event decides
            log.warning("build failed on %s (%s); rescheduled to alternate host %s",
                        host, reason, target)
            scheduler_metrics.rescheduled("moved")
            return target
        self.placement.delete_allocations(uuid)
        failed = f"{reason}; no alternate host would take it"
        if instances.fail(self.store, spec, read, failed) is not None:
            log.error("ERROR: %s (allocation freed)", failed)
            scheduler_metrics.rescheduled("failed")
        return None

    def on_record_gone(self, host: str, uuid: str) -> None:
        """The record left `host`: if the instance is known nowhere else, forget its keys."""
        location = instances.locate(self.store, uuid)
        if location is not None and location["host"] == host:
            instances.forget(self.store, uuid, host, location.get("group"))

    # --- everything, once -------------------------------------------------------------------

    def sweep(self) -> dict[str, int]:
        """Act on every record and location as if each had just changed."""
        entries, _ = self.store.get_prefix(self.keys.hosts(), keys_only=True)
        records: set[tuple[str, str]] = set()
        for entry in entries:
            parsed = self.keys.parse_host_key(entry.key)
            if parsed is not None and parsed.kind == RECORDS:
                records.add((parsed.host, parsed.uuid))
        rescheduled = forgotten = 0
        for host in sorted({host for host, _ in records}):
            found = self.store.read_prefix(messages.INSTANCE_RECORD, self.keys.records(host))
            for uuid, record in found.items():
                if record["state"] == instances.RESCHEDULING:
                    self.on_record(host, uuid)
                    rescheduled += 1
        located = self.store.read_prefix(messages.INSTANCE_LOCATION, self.keys.locations())
        for uuid, location in located.items():
            if (location["host"], uuid) not in records and instances.forget(
                    self.store, uuid, location["host"], location.get("group")) is not None:
                forgotten += 1
        return {"records": len(records), "rescheduled": rescheduled, "forgotten": forgotten}

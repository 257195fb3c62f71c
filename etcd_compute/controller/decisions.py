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
- `on_record(host, uuid)` of a DELETED record: a move it was in is given up; the
  operator's keys of that instance (location, group member), which its host could
  not touch, are bound to the record's lease and expire with it.
- `on_record_gone(host, uuid)`: a record expired or was removed -> forget the
  operator's keys of that instance that are still there.
- `on_alive(host, present)` and `recover_due()`: a host whose heartbeat lease
  expired is down; once it has been down for `host_failure_grace_seconds`, each
  of its instances gets its recovery policy: `rebuild` (placed again by the
  scheduler's own query, filters and weighers, its server group honoured) or
  `error` (ERROR "host ... is down", claim freed). The instances to rebuild go
  together, as the scheduler service's batch: one plan for all of them (one
  candidates query per request shape: `scheduler/evacuation.py`), their claims
  moved in one Placement call (generations checked), then their specs,
  records, locations and group members in one etcd transaction that also
  checks the host is still down and each instance as read (within etcd's
  --max-txn-ops; more go in more). If the claim or the transaction does not
  hold for all, each goes on its own as before. A destroy asked of a dead
  host is finished here. The host itself powered its guests off before its
  lease could expire (self-fencing), and destroys the stale copies when it
  comes back.
- `sweep()`: all of the above for everything, when we become leader (events
  before that were someone else's business, or nobody's).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from typing import Any

from etcd_compute import claims, events, hosts, messages
from etcd_compute.controller import metrics as controller_metrics
from etcd_compute.controller import moved_claims
from etcd_compute.controller.fencing import Fencing, Verdict
from etcd_compute.controller.migrations import MoveSteps
from etcd_compute.defaults import DELETED_RECORD_TTL
from etcd_compute.errors import ConflictError, EtcdComputeError, NoValidHost
from etcd_compute.etcd import KeyValueStore, Txn
from etcd_compute.instances import host as host_txn
from etcd_compute.instances import moves, ownership, records, states
from etcd_compute.keys import RECORDS
from etcd_compute.placement import PlacementClient
from etcd_compute.scheduler.planner import Pick

LOG = logging.getLogger("etcd_compute.controller")


class _Changed(Exception):
    """The instance changed while the controller moved it: the move was undone."""


@dataclass
class _Rebuild:
    """An instance of a dead host to rebuild elsewhere, as read."""

    spec: dict[str, Any]
    read: records.RecordRead
    spec_revision: int | None


def instance_log(uuid: str) -> logging.LoggerAdapter:
    return logging.LoggerAdapter(LOG, {"instance": uuid})


def _how(verdict: Verdict | None, fencing: bool) -> str | None:
    """How a dead host was dealt with, for its instances' events (None without fencing)."""
    if verdict is not None:
        return verdict.how()
    return "recovered after TTL + grace (its fence not done)" if fencing else None


class Controller:
    def __init__(self, store: KeyValueStore, placement: PlacementClient,
                 settings: dict[str, Any] | None = None,
                 place: Callable[[dict[str, Any], frozenset[str]], Pick] | None = None,
                 clock: Callable[[], float] = time.monotonic,
                 place_many: Callable[[list[dict[str, Any]], frozenset[str]],
                                      dict[str, Pick | NoValidHost]] | None = None,
                 fencing: Fencing | None = None):
        self.store = store
        self.keys = store.keys
        self.placement = placement
        settings = settings or {}
        self.grace = settings.get("host_failure_grace_seconds", 10)
        self.default_policy = settings.get("on_host_failure", "rebuild")
        self.deleted_record_ttl = settings.get("deleted_record_ttl", DELETED_RECORD_TTL)
        # Where an instance of a dead host would go now (Scheduler.place), and several
        # (evacuation.place_many: one plan for all).
        self.place = place
        self.place_many = place_many
        self.max_txn_ops = settings.get("etcd_max_txn_ops", 128)
        self.clock = clock
        # Hosts without a heartbeat, since when (our clock).
        self.down_since: dict[str, float] = {}
        self.fencing = fencing or Fencing(settings.get("fencing"))
        # Moves between hosts in flight (controller/migrations.py).
        self.moves = MoveSteps(store, placement)

    # --- records --------------------------------------------------------------------------

    def on_record(self, host: str, uuid: str) -> None:
        read = records.read_record(self.store, host, uuid)
        if read.state == states.RESCHEDULING:
            self.reschedule(host, uuid, read)
        elif read.state == states.DELETED:
            self.moves.step(uuid)  # a move it was in is given up (its claims freed)
            ownership.expire_with_record(self.store, uuid)
        else:
            self.moves.step(uuid)  # either end of a move (one read when none is in flight)

    def reschedule(self, host: str, uuid: str, read: records.RecordRead) -> str | None:
        """Move a build that failed on `host` to a live alternate; the new host, or None."""
        log = instance_log(uuid)
        entry, spec = records.read_spec(self.store, host, uuid)
        reason = (read.record or {}).get("error") or "build failed"
        if spec is None or spec["action"] not in ("build", "evacuate"):
            return None  # a destroy (or garbage) got in: its host deals with it
        # A drained instance goes where the scheduler would put it now (the alternates
        # were chosen for its first build and may be disabled by now).
        alternates = (spec.get("alternates") or []) if spec["action"] == "build" else []
        for index, alternate in enumerate(alternates):
            target = alternate["host"]
            if not hosts.is_alive(self.store, target):
                log.info("alternate %s has no heartbeat; skipping it", target)
                continue
            try:
                generation = claims.move(self.placement, uuid, alternate["allocations"],
                                         spec["project_id"], spec["user_id"])
            except EtcdComputeError as exc:
                log.info("alternate %s refused the claim (%s); trying the next", target, exc)
                continue
            if claims.written_or_undone(
                    partial(moves.move, self.store, spec, read, target,
                            alternate["allocations"], alternates[index + 1:],
                            spec_revision=entry.mod_revision),
                    partial(moved_claims.put_back, self.store, self.placement, spec,
                        generation)) is None:
                controller_metrics.rescheduled("conflict")
                return None  # it changed meanwhile (a destroy): the next event decides
            log.warning("build failed on %s (%s); rescheduled to alternate host %s",
                        host, reason, target)
            controller_metrics.rescheduled("moved")
            return target
        try:
            placed = self._place_again(spec, read, host, entry.mod_revision)
        except _Changed:
            controller_metrics.rescheduled("conflict")
            return None  # a destroy got in: its host acts on it
        if placed is not None:
            log.warning("%s; placed again on %s", reason, placed)
            controller_metrics.rescheduled("moved")
            return placed
        failed = f"{reason}; no alternate host would take it"
        if host_txn.fail(self.store, spec, read, failed, action="reschedule",
                          by=events.CONTROLLER) is not None:
            self.placement.delete_allocations(uuid)
            log.error("ERROR: %s (allocation freed)", failed)
            controller_metrics.rescheduled("failed")
        return None

    def _place_again(self, spec: dict[str, Any], read: records.RecordRead,
                     host: str, spec_revision: int) -> str | None:
        """No kept alternate took it: ask the scheduler where it would go now (its query,
        filters and weighers, its group honoured; `host` left out). None if nowhere;
        _Changed if the instance changed meanwhile (the claim is put back)."""
        if self.place is None:
            return None
        try:
            pick = self.place(spec, frozenset({host}))
            generation = claims.move(self.placement, spec["uuid"], pick.allocations,
                                     spec["project_id"], spec["user_id"])
        except EtcdComputeError as exc:
            instance_log(spec["uuid"]).info("no other host for it now (%s)", exc)
            return None
        if claims.written_or_undone(
                partial(moves.move, self.store, spec, read, pick.host.uuid, pick.allocations,
                        [], spec_revision=spec_revision),
                partial(moved_claims.put_back, self.store, self.placement, spec,
                        generation)) is None:
            raise _Changed()
        return pick.host.uuid

    def on_record_gone(self, host: str, uuid: str) -> None:
        """The record left `host`: if the instance is known nowhere else, forget its keys."""
        self.moves.step(uuid)
        location = records.locate(self.store, uuid)
        if location is not None and location["host"] == host:
            ownership.forget(self.store, uuid, host, location.get("group"))

    # --- dead hosts -------------------------------------------------------------------------

    def on_alive(self, host: str, present: bool) -> None:
        if present:
            if self.down_since.pop(host, None) is not None:
                LOG.info("host %s is back", host)
            self.fencing.forget(host)
        elif host not in self.down_since:
            self.down_since[host] = self.clock()
            LOG.warning("host %s lost its heartbeat; its instances are recovered in %g s "
                        "unless it comes back%s", host, self.grace,
                        " or is fenced first" if self.fencing.enabled else "")
            self._begin_fence(host)

    def _begin_fence(self, host: str) -> None:
        """Fence `host` in the background: its instances' guests, where its libvirtd is."""
        if not self.fencing.enabled:
            return
        held = self.store.read_prefix(messages.INSTANCE_RECORD, self.keys.records(host))
        uuids = sorted(uuid for uuid, record in held.items() if record["state"] in states.LIVE)
        if not uuids:
            return  # nothing of it could run twice
        self.fencing.begin(host, self._provider_name(host), hosts.libvirt_address(
            self.store, host), uuids)

    def _provider_name(self, host: str) -> str | None:
        """The name its libvirtd's certificate must bear: Placement's (unique: a host
        cannot take another's there; its records' host_name is its own word)."""
        try:
            provider = self.placement.get_provider(host)
        except EtcdComputeError as exc:
            LOG.error("host %s: its name not known (%s); no fence through its libvirtd",
                      host, exc)
            return None
        return (provider or {}).get("name")

    def recover_due(self) -> list[str]:
        """Recover the instances of every host fenced, or down for the grace period; the
        hosts done."""
        done = []
        for host, since in list(self.down_since.items()):
            verdict = self.fencing.verdict(host)
            fenced = verdict is not None and verdict.fenced
            if fenced or self.clock() - since >= self.grace:
                self.recover_host(host, verdict)
                done.append(host)
        return done

    def recover_host(self, host: str, verdict: Verdict | None = None) -> None:
        if hosts.is_alive(self.store, host):
            self.on_alive(host, True)  # back before we acted: nothing to do
            return
        how = _how(verdict, self.fencing.enabled)
        rebuilds = []
        for uuid in sorted(self.store.read_prefix(messages.INSTANCE_RECORD,
                                                  self.keys.records(host))):
            outcome = self._recovery(host, uuid, how)
            if isinstance(outcome, _Rebuild):
                rebuilds.append(outcome)
            else:
                controller_metrics.recovered(outcome)
        for outcome in self._rebuild_all(host, rebuilds, how):
            controller_metrics.recovered(outcome)
        controller_metrics.host_recovered(verdict.path if verdict is not None and
                                          verdict.fenced and verdict.path else "grace")
        self.fencing.forget(host)

    def recover_instance(self, host: str, uuid: str) -> str:
        """Apply the instance's policy; what was done ("rebuilt", "error", "deleted",
        "left" (nothing to do or it changed meanwhile), "retry")."""
        outcome = self._recovery(host, uuid)
        if isinstance(outcome, _Rebuild):
            return self._rebuild_all(host, [outcome])[0]
        return outcome

    def _recovery(self, host: str, uuid: str, how: str | None = None) -> str | _Rebuild:
        """What the instance's policy does now, or what to rebuild (done together)."""
        log = instance_log(uuid)
        read = records.read_record(self.store, host, uuid)
        if read.state in (None, states.ERROR, states.DELETED):
            return "left"
        if read.state in (states.INCOMING, states.MIGRATED):
            # Not its home, or its guest left: the move's steps decide (a hand-over, a revert).
            self.moves.step(uuid, dead=host)
            return "left"
        if read.state == states.MIGRATING:
            self.moves.abandon(uuid, f"its host {host} died during the move")
        entry, spec = records.read_spec(self.store, host, uuid)
        if spec is None:
            spec = {"uuid": uuid, "host": host, "resources": read.record["resources"]}
        if spec.get("action") == "destroy" or read.state == states.DELETING:
            if moves.finish_destroy_on_dead_host(
                    self.store, spec, read, self.deleted_record_ttl,
                    detail="its host was down: finished by the controller") is None:
                return "left"
            self.placement.delete_allocations(uuid)
            log.warning("host %s is down: destroy finished here (claim freed); the host "
                        "cleans up if it returns", host)
            return "deleted"
        policy = spec.get("on_host_failure") or self.default_policy
        if policy == "rebuild" and "project_id" in spec and \
                (self.place is not None or self.place_many is not None):
            return _Rebuild(spec, read, entry.mod_revision if entry else None)
        return self._fail(spec, read, f"host {host} is down" + (f"; {how}" if how else ""))

    def _rebuild_all(self, host: str, rebuilds: list[_Rebuild],
                     how: str | None = None) -> list[str]:
        """Rebuild these instances of `host` elsewhere: one plan, then per chunk (etcd's
        --max-txn-ops) one claim move and one transaction; what does not hold for all
        goes one by one. The outcome of each, in order."""
        if not rebuilds:
            return []
        exclude = frozenset({host})
        if self.place_many is not None:
            placed = self.place_many([item.spec for item in rebuilds], exclude)
        else:
            placed = {}
            assert self.place is not None
            for item in rebuilds:
                try:
                    placed[item.spec["uuid"]] = self.place(item.spec, exclude)
                except NoValidHost as exc:
                    placed[item.spec["uuid"]] = exc
        outcomes: dict[str, str] = {}
        going: list[tuple[_Rebuild, Pick]] = []
        for item in rebuilds:
            result = placed[item.spec["uuid"]]
            if isinstance(result, NoValidHost):
                outcomes[item.spec["uuid"]] = self._fail(
                    item.spec, item.read, f"host {host} is down and no other host can take "
                    f"it ({(result.reasons or ['no valid host'])[0]})"
                    + (f"; {how}" if how else ""))
            else:
                going.append((item, result))
        for chunk in self._chunks(going):
            outcomes.update(self._rebuild_together(chunk, how))
        return [outcomes[item.spec["uuid"]] for item in rebuilds]

    def _chunks(self, going: list[tuple[_Rebuild, Pick]]) -> list[list[tuple[_Rebuild, Pick]]]:
        chunks: list[list[tuple[_Rebuild, Pick]]] = []
        ops = 0
        for item, pick in going:
            txn = moves.evacuate_txn(self.store, item.spec, item.read, pick.host.uuid,
                                     pick.allocations, item.spec_revision)
            size = max(len(txn.success), len(txn.compare))
            if not chunks or ops + size > self.max_txn_ops:
                chunks.append([])
                ops = 0
            chunks[-1].append((item, pick))
            ops += size
        return chunks

    def _rebuild_together(self, chunk: list[tuple[_Rebuild, Pick]],
                          how: str | None = None) -> dict[str, str]:
        """One claim move and one transaction for all of them, or each on its own."""
        if len(chunk) > 1:
            try:
                generations = claims.move_many(self.placement, [
                    (item.spec["uuid"], pick.allocations, item.spec["project_id"],
                     item.spec["user_id"]) for item, pick in chunk])
            except ConflictError as exc:
                LOG.info("moving %d claims together lost a race (%s); one by one", len(chunk),
                         exc)
            else:
                txn = Txn()
                for item, pick in chunk:
                    txn = txn + moves.evacuate_txn(self.store, item.spec, item.read,
                                                   pick.host.uuid, pick.allocations,
                                                   item.spec_revision, how)
                # One changed (the host came back, a destroy got in): claims back as they
                # were, then each on its own (its own compares decide).
                if claims.written_or_undone(
                        partial(self.store.commit, txn),
                        partial(moved_claims.put_back_all, self.store, self.placement,
                                [item.spec for item, _ in chunk], generations)) is not None:
                    for item, pick in chunk:
                        self._rebuilt(item.spec, pick)
                    return {item.spec["uuid"]: "rebuilt" for item, _ in chunk}
        return {item.spec["uuid"]: self._rebuild(item.spec, item.read, pick,
                                                 item.spec_revision, how)
                for item, pick in chunk}

    def _fail(self, spec: dict[str, Any], read: records.RecordRead, reason: str) -> str:
        # etcd first: if the host came back meanwhile, its instance keeps its claim.
        down = (moves.host_down(self.keys, spec["host"]),)
        if host_txn.fail(self.store, spec, read, reason, guard=down, action="recover",
                          by=events.CONTROLLER) is None:
            return "left"
        self.placement.delete_allocations(spec["uuid"])
        instance_log(spec["uuid"]).error("ERROR: %s (allocation freed)", reason)
        return "error"

    def _rebuild(self, spec: dict[str, Any], read: records.RecordRead, pick: Pick,
                 spec_revision: int | None, how: str | None = None) -> str:
        uuid, target = spec["uuid"], pick.host.uuid
        try:
            generation = claims.move(self.placement, uuid, pick.allocations,
                                     spec["project_id"], spec["user_id"])
        except ConflictError as exc:
            instance_log(uuid).info("claim on %s lost a race (%s); trying again", target, exc)
            return "retry"
        # The host came back, or a destroy got in: the claim goes back as it was.
        if claims.written_or_undone(
                partial(moves.evacuate, self.store, spec, read, target, pick.allocations,
                        spec_revision=spec_revision, how=how),
                partial(moved_claims.put_back, self.store, self.placement, spec,
                        generation)) is None:
            return "left"
        self._rebuilt(spec, pick)
        return "rebuilt"

    @staticmethod
    def _rebuilt(spec: dict[str, Any], pick: Pick) -> None:
        instance_log(spec["uuid"]).warning(
            "host %s is down: instance rebuilt on %s (%s) from its image; its local disk is "
            "lost", spec["host"], pick.host.name, pick.host.uuid)

    # --- everything, once -------------------------------------------------------------------

    def sweep(self) -> dict[str, int]:
        """Act on every record and location as if each had just changed."""
        entries, _ = self.store.get_prefix(self.keys.hosts(), keys_only=True)
        held: set[tuple[str, str]] = set()
        for entry in entries:
            parsed = self.keys.parse_host_key(entry.key)
            if parsed is not None and parsed.kind == RECORDS:
                held.add((parsed.host, parsed.uuid))
        rescheduled = forgotten = 0
        for host in sorted({host for host, _ in held}):
            found = self.store.read_prefix(messages.INSTANCE_RECORD, self.keys.records(host))
            for uuid, record in found.items():
                if record["state"] == states.RESCHEDULING:
                    self.on_record(host, uuid)
                    rescheduled += 1
                elif record["state"] == states.DELETED:
                    self.on_record(host, uuid)
        for host in {host for host, _ in held} - hosts.alive_hosts(self.store):
            self.on_alive(host, False)
        self.moves.sweep()
        located = self.store.read_prefix(messages.INSTANCE_LOCATION, self.keys.locations())
        for uuid, location in located.items():
            if (location["host"], uuid) not in held and ownership.forget(
                    self.store, uuid, location["host"], location.get("group")) is not None:
                forgotten += 1
        return {"records": len(held), "rescheduled": rescheduled, "forgotten": forgotten,
                "hosts_down": len(self.down_since)}

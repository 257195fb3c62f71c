"""An instance moving between hosts, on either end (docs/explanation/moves.md).

In the daemon's main loop, like the rest of `machine.py`; each step is a transaction of
`instances/migrations.py`, each driver call a job in the worker pool:

- **The destination** (spec action `incoming`, record INCOMING). It makes room if
  Placement holds the instance's claim here (job `prepare`: the driver's
  `prepare_incoming`) and answers with the driver's target, or the error, in its record.
  A cold move's files arrived and the controller wrote what the source sent into the
  request: it checks and defines the guest (job `finish`) and answers finished. A move
  called off (the request's `cancel`): it throws away what it made (job `discard`, never a
  guest that runs here, unless the move was finished here awaiting a confirm and was
  reverted: that guest is destroyed) and its spec and record for the instance go.
- **The source** (spec action `migrate`). It takes the request up as any action (MIGRATING)
  and waits for the destination's target (the controller writes it into the request);
  then job `migrate`: live, the guest crosses (the driver's `live_migrate`); cold, it is
  shut down and its files sent (`send_stopped`). Success: MIGRATED (the controller hands
  the instance over); failure: as it was, the error in its events. A `cancel` while it
  runs raises a flag the job's driver polls (`cancelled`): the guest stays here. When the
  hand-over took the instance's keys away, what is left of a cold move's stopped copy
  here goes (job `leave`).

Every step that defines the guest somewhere is checked against Placement first, by the one
rule every build and action passes (`claims.holding`): the destination makes room and
defines a cold move's guest only while the instance's consumer holds it alone at exactly
the instance's size; the source moves the guest only while that holds there and the
move's migration consumer holds the source alone at the same size. Otherwise the step is
refused, its reason in the record, and the move is called off.
"""

from __future__ import annotations

import concurrent.futures
import logging
from pathlib import Path
from typing import Any

from etcd_compute import claims
from etcd_compute.compute import worker
from etcd_compute.compute.parts import Machine
from etcd_compute.compute.pool import Job, WorkerPool
from etcd_compute.instances import actions as action_txn
from etcd_compute.instances import migrations, records, states

LOG = logging.getLogger("etcd_compute.compute")


def instance_log(uuid: str) -> logging.LoggerAdapter:
    return logging.LoggerAdapter(LOG, {"instance": uuid})


class InstanceMoves:
    def __init__(self, machine: Machine):
        self.machine = machine
        self.store = machine.store
        self.placement = machine.placement

    # -------------------------------------------------------------- destination

    def on_incoming(self, spec: dict[str, Any], spec_revision: int) -> None:
        machine, uuid = self.machine, spec["uuid"]
        log = instance_log(uuid)
        if uuid in machine.jobs or machine.stopping.is_set():
            return  # its job's end reads the spec again
        read = machine.read(spec["host"], uuid)
        request = spec.get("request") or {}
        task = (read.record or {}).get("task") or {}
        if read.state != states.INCOMING or task.get("id") != request.get("id"):
            if read.state in (states.ACTIVE, states.SHUTOFF):
                return  # handed over: the spec is a plain one now
            log.warning("incoming spec without its INCOMING record here (%s): left as it is",
                        read.state)
            return
        if request.get("cancel"):
            log.info("the move here is off (%s): discarding what was made ready",
                     request["cancel"])
            machine.submit(worker.DISCARD, spec, read.revision, task=task)
        elif read.record.get("error"):
            return  # answered with the error: the controller calls the move off
        elif request.get("moved") and not task.get("finished"):
            if self._refused_here(spec, read):
                return
            log.info("its files arrived from %s: defining it here", request.get("source"))
            machine.submit(worker.FINISH, spec, read.revision,
                           task={**task, "moved": request["moved"]})
        elif "target" not in task:
            if self._refused_here(spec, read):
                return
            log.info("making room for it (moving here from %s)", request.get("source"))
            machine.submit(worker.PREPARE, spec, read.revision, task=task)

    def _refused_here(self, spec: dict[str, Any], read: records.RecordRead) -> bool:
        """The destination's claim check (`claims.holding`: the instance's consumer holds
        this host alone at exactly its size); not held: the error answered, True."""
        holding = claims.holding(self.placement, spec["uuid"], spec["host"],
                                 spec["resources"])
        if holding.held:
            return False
        instance_log(spec["uuid"]).error("refused the move here: %s", holding.why())
        if migrations.answer(self.store, read, error=f"refused: {holding.why()}") is None:
            self.machine.reread_later(spec)
        return True

    # ------------------------------------------------------------------- source

    def on_migrate(self, spec: dict[str, Any], spec_revision: int) -> None:
        machine, store, uuid = self.machine, self.store, spec["uuid"]
        log = instance_log(uuid)
        request = spec.get("request") or {}
        job = machine.jobs.get(uuid)
        if job is not None:
            if job.kind == worker.MIGRATE and request.get("cancel"):
                self._raise_cancel(uuid)
            return
        if machine.stopping.is_set():
            return
        read = machine.read(spec["host"], uuid)
        task = (read.record or {}).get("task") or {}
        if read.state == states.MIGRATING and task.get("id") == request.get("id"):
            if request.get("cancel"):
                entry = store.get(store.keys.spec(spec["host"], uuid))
                action_txn.end_action(store, read, entry, f"move called off: "
                                      f"{request['cancel']}")
            elif request.get("target"):
                reason = self.claim_refusal(spec, request)
                if reason is not None:
                    log.error("move not started: %s", reason)
                    entry = store.get(store.keys.spec(spec["host"], uuid))
                    action_txn.end_action(store, read, entry, f"refused: {reason}")
                    return
                log.info("moving to %s (%s)", request.get("destination"),
                         "live" if request.get("live") else "cold")
                self._clear_cancel(uuid)
                machine.submit(worker.MIGRATE, spec, read.revision,
                               task={**task, "target": request["target"]})
            return
        if read.record is None or read.record.get("request_id") == request.get("id"):
            return  # not ours, or done (or refused) already
        # Called off before this host took it up: said as when called off after (which
        # side of that race the cancel lands on is timing, not news for the caller).
        reason = f"move called off: {request['cancel']}" if request.get("cancel") else None
        if reason is None:
            try:
                states.check_action(read.state, states.MIGRATE, uuid)
            except states.ActionRefused as exc:
                reason = str(exc)
            if request.get("live") and read.state != states.ACTIVE:
                reason = f"a live move needs a running guest; the instance is {read.state}"
            reason = reason or self.claim_refusal(spec, request)
        if reason is not None:
            log.warning("refused migrate: %s", reason)
            if action_txn.refuse_action(store, spec, spec_revision, read, reason) is None:
                machine.reread_later(spec)
            return
        if action_txn.begin_action(store, spec, spec_revision, read) is None:
            machine.reread_later(spec)
            return
        log.info("migrate to %s asked by %s; waiting for it to be ready there",
                 request.get("destination"), request.get("by") or "(unknown)")
        machine.reread_later(spec)  # a target written meanwhile is looked at now

    def claim_refusal(self, spec: dict[str, Any], request: dict[str, Any]) -> str | None:
        """The source's claim check, by the rule every action passes (`claims.holding`):
        the instance's consumer holds the destination alone at exactly the instance's size
        (the guest is defined there), and the move's migration consumer this host alone at
        the same (the guest runs here until it left). Why not, or None."""
        wanted, there = spec["resources"], request.get("destination")
        if not there or not request.get("migration"):
            return "a move's request names its destination and its migration consumer"
        arriving = claims.holding(self.placement, spec["uuid"], there, wanted)
        if not arriving.held:
            return f"at the destination {there}: {arriving.why()}"
        staying = claims.holding(self.placement, request["migration"], spec["host"], wanted)
        if not staying.held:
            return f"the migration {request['migration']} on this host: {staying.why()}"
        return None

    def on_spec_gone(self, rp_uuid: str, uuid: str) -> None:
        """The spec left: if the instance's record left too (handed to another host after a
        cold move), what is left of its stopped copy here goes, claims untouched."""
        machine = self.machine
        if uuid in machine.jobs or machine.stopping.is_set():
            return
        if machine.read(rp_uuid, uuid).record is None:
            machine.submit(worker.LEAVE, {"uuid": uuid, "host": rp_uuid}, 0)

    # -------------------------------------------------------------------- ends

    def finish(self, job: Job, error: str | None) -> None:
        machine, store, uuid = self.machine, self.store, job.uuid
        log, spec = instance_log(uuid), job.spec
        result = job.future.result() if error is None else {}
        read = machine.read(spec["host"], uuid)
        if job.kind == worker.LEAVE:
            if error is not None:
                log.error("could not remove what was left of it here: %s", error)
            return
        if job.kind == worker.MIGRATE:
            self._clear_cancel(uuid)
            task = (read.record or {}).get("task") or {}
            if read.state != states.MIGRATING or task.get("id") != (job.task or {}).get("id"):
                return  # a destroy (or the controller) took it over
            if error is None:
                figures = {k: v for k, v in (result.get("figures") or {}).items()
                           if isinstance(v, (int, float, str)) or v is None}
                migrations.migrated(store, read, figures, result.get("moved"))
                log.info("moved to %s", task.get("destination"))
            else:
                log.error("move failed: %s", error)
                entry = store.get(store.keys.spec(spec["host"], uuid))
                action_txn.end_action(store, read, entry, error)
        elif read.state != states.INCOMING:
            return  # the controller handed it over, or it was discarded
        elif job.kind == worker.PREPARE:
            if error is None:
                migrations.answer(store, read, target=result)
            else:
                log.error("could not make room for it: %s", error)
                migrations.answer(store, read, error=f"the destination could not make room "
                                  f"for it: {error}")
        elif job.kind == worker.FINISH:
            if error is None:
                migrations.answer(store, read, finished=True, ip=result.get("ip"))
            else:
                log.error("could not define it here: %s", error)
                migrations.answer(store, read, error=f"the destination could not define "
                                  f"it: {error}")
        elif job.kind == worker.DISCARD:
            entry = store.get(store.keys.spec(spec["host"], uuid))
            if error is not None:
                log.error("could not discard what was made ready: %s", error)
                migrations.answer(store, read, error=f"not discarded: {error}")
            elif entry is not None:
                migrations.discarded(store, entry, read)
        machine.reread_later(spec)

    # ------------------------------------------------- a destroy during the move

    def ended_elsewhere(self, job: Job, error: str | None) -> bool:
        """A destroy was asked while `job` ran. A live move that switched over before the
        cancel reached it leaves the guest running on the destination: the move is
        finished (MIGRATED) and the destroy goes with the instance (the controller hands
        it over with the destroy, which the destination carries out: a delete asked during
        a live migration is honoured once it ends, as Nova does). True then. False: the
        guest is here (the move failed, was cancelled in time, or sent a cold copy that
        is still here): the caller destroys it here."""
        if job.kind != worker.MIGRATE or error is not None or \
                not (job.task or {}).get("live"):
            self._clear_cancel(job.uuid)
            return False
        instance_log(job.uuid).warning("the guest had switched over when the destroy came: "
                                       "the move ends, then it is destroyed there")
        self.finish(job, None)
        return True

    def destroyed_where_it_lands(self, read: records.RecordRead) -> bool:
        """A destroy asked of a source whose guest left (MIGRATED, its move still in
        flight: the hand-over to come carries the destroy to the destination). True: not
        for this host to do."""
        if read.state != states.MIGRATED or read.record is None:
            return False
        migration, _ = migrations.read(self.store, read.record["uuid"])
        if migration is None or migration["request_id"] != read.record.get("request_id"):
            return False
        instance_log(read.record["uuid"]).info(
            "destroy asked as its move ends: carried out where it lands")
        return True

    # ------------------------------------------------------------ cancel flags

    def cancel(self, uuid: str) -> None:
        """Cancel the instance's move in flight (a destroy came): a guest on its way is not
        killed with its worker; the destroy runs when the move ended, where the guest is
        then (`ended_elsewhere`: a source's record stays MIGRATING until its job ends)."""
        self._raise_cancel(uuid)

    @staticmethod
    def schedule(pool: WorkerPool, kind: str, spec: dict[str, Any],
                 task: dict[str, Any] | None, timeout: float) -> concurrent.futures.Future:
        """A move's step in the pool. A migration runs under the driver's own bound: the
        job's timeout (three job timeouts) only catches a worker that hangs."""
        return pool.schedule(worker.move, kind, spec, task,
                             timeout=timeout * (3 if kind == worker.MIGRATE else 1))

    def _flag(self, uuid: str) -> Path:
        return worker.cancel_flag(self.machine.settings["state_dir"], uuid)

    def _raise_cancel(self, uuid: str) -> None:
        flag = self._flag(uuid)
        if not flag.exists():
            instance_log(uuid).warning("cancelling the move in flight")
            flag.parent.mkdir(parents=True, exist_ok=True)
            flag.write_text("")

    def _clear_cancel(self, uuid: str) -> None:
        self._flag(uuid).unlink(missing_ok=True)

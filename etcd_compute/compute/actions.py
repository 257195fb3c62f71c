"""An operator's action on an instance of this host: stop, start, reboot, rebuild, resize,
snapshot.

The operator's side writes the action into the host's spec with a request id
(`instances.actions.request_action`, once the record's state allows it). Here, in
the daemon's main loop like the rest of `machine.py`:

- A request is taken up once: the record moves to the action's state and keeps
  the request as its task (`instances.actions.begin_action`). Or it is refused, the
  reason in the instance's events and the request id noted in the record, so a
  repeated delivery changes nothing: not allowed in the record's state (the spec
  was written past the CLI's check), or a resize whose new size Placement does
  not hold the claim for here (a host trusts Placement, not whoever wrote the
  spec).
- Its claim is checked first, as a build's is (`claims.holding`: this host alone,
  exactly the size the instance has, or a resize's new size): an action on an
  instance whose claim is not held here is refused, or, resumed after a restart,
  ends in error, before the driver is asked anything.
- Its driver job runs in the pool (`worker.act`); a restart, a fence or a lost
  worker runs it again from the record's task.
- Its end is one transaction (`instances.actions.end_action`): success writes the new
  size or image into record and spec; a failure leaves both as they were, and a
  failed resize's claim is put back to the size the instance has (the old size it
  held for a confirm freed in the same Placement request).
- A destroy takes over at any moment (`machine.start_destroy` cancels the job);
  another request written while one runs is read again when it ends.
"""

from __future__ import annotations

import logging
from typing import Any

from etcd_compute import claims
from etcd_compute.compute import metrics as compute_metrics
from etcd_compute.compute.parts import Machine
from etcd_compute.compute.pool import Job
from etcd_compute.instances import actions as action_txn
from etcd_compute.instances import ownership, records, states

LOG = logging.getLogger("etcd_compute.compute")
# How often the end of an action is recorded again when the spec changed under it.
END_ATTEMPTS = 5


def instance_log(uuid: str) -> logging.LoggerAdapter:
    return logging.LoggerAdapter(LOG, {"instance": uuid})


class LifecycleActions:
    def __init__(self, machine: Machine):
        self.machine = machine
        self.store = machine.store
        self.placement = machine.placement

    # -------------------------------------------------------------- requests

    def on_request(self, spec: dict[str, Any], spec_revision: int) -> None:
        """A spec whose action is one of `states.ACTIONS` (new, again, or at reconcile)."""
        machine, store = self.machine, self.store
        uuid, host, log = spec["uuid"], spec["host"], instance_log(spec["uuid"])
        if uuid in machine.jobs or machine.stopping.is_set():
            return  # busy: the spec is read again when its job ends
        read = machine.read(host, uuid)
        if read.record is None:
            if read.fault is None:
                # Nothing of ours by that uuid: nothing to act on, nothing of another's touched.
                log.error("refused: %s of an instance this host does not hold; spec %s "
                          "dropped", spec["action"], store.keys.spec(host, uuid))
                ownership.drop_key(store, store.keys.spec(host, uuid), spec_revision)
            return
        if read.state in states.TRANSIENT:
            if read.record.get("task"):
                log.info("resuming %s cut short (restart, fence or lost worker)",
                         read.record["task"]["action"])
                self.resume(spec, read)
            else:
                log.warning("record %s with no task (written by hand?): left as it is",
                            read.state)
            return
        request = spec.get("request")
        if request is not None and read.record.get("request_id") == request["id"]:
            return  # done, or refused, already
        reason = self.refusal(spec, read)
        if reason is not None:
            log.warning("refused %s: %s", spec["action"], reason)
            compute_metrics.action_refused(spec["action"])
            if action_txn.refuse_action(store, spec, spec_revision, read, reason) is None:
                machine.reread_later(spec)
            return
        assert request is not None
        if action_txn.begin_action(store, spec, spec_revision, read) is None:
            machine.reread_later(spec)  # someone moved first: act on what is there now
            return
        log.info("%s requested by %s", spec["action"], request.get("by") or "(unknown)")
        self.run(spec, machine.read(host, uuid))

    def refusal(self, spec: dict[str, Any], read: records.RecordRead) -> str | None:
        """Why the spec's request is not acted on here, or None."""
        request = spec.get("request")
        if request is None:
            return "the spec carries no request (actions are asked with schedule.py)"
        try:
            states.check_action(read.state, spec["action"])
        except states.ActionRefused as exc:
            return str(exc)
        wanted = spec["resources"]
        if spec["action"] == states.RESIZE:
            wanted = request.get("resources")
            if not wanted or request.get("allocations") != {spec["host"]: {"resources": wanted}}:
                return "a resize names its new resources, claimed on this host only"
        return self.claim_refusal(spec, wanted)

    def claim_refusal(self, spec: dict[str, Any], wanted: dict[str, int]) -> str | None:
        """Why the instance's claim does not let this host act (`claims.holding`: here
        alone, exactly `wanted`), or None."""
        holding = claims.holding(self.placement, spec["uuid"], spec["host"], wanted)
        return None if holding.held else holding.why()

    def resume(self, spec: dict[str, Any], read: records.RecordRead) -> None:
        """An action cut short runs again, its claim checked first: not held, it ends in
        error (the guest as it is)."""
        assert read.record is not None
        task = read.record["task"]
        # A resize's claim holds its new size until it ends.
        wanted = task.get("resources") if task["action"] == states.RESIZE else None
        reason = self.claim_refusal(spec, wanted or spec["resources"])
        if reason is None:
            self.run(spec, read)
            return
        instance_log(spec["uuid"]).error("%s not resumed: %s", task["action"], reason)
        entry = self.store.get(self.store.keys.spec(spec["host"], spec["uuid"]))
        if action_txn.end_action(self.store, read, entry, f"refused: {reason}") is None:
            self.machine.reread_later(spec)

    def run(self, spec: dict[str, Any], read: records.RecordRead) -> None:
        """Submit the job of the record's task."""
        assert read.record is not None
        task = read.record["task"]
        self.machine.consoles.forget(spec["uuid"])
        self.machine.submit(task["action"], spec, read.revision, task=task)

    # ------------------------------------------------------------------ ends

    def finish(self, job: Job, error: str | None) -> None:
        """The action's job ended (`error` None: it did what was asked)."""
        machine, store = self.machine, self.store
        spec, uuid, log = job.spec, job.uuid, instance_log(job.uuid)
        assert job.task is not None
        result = job.future.result() if error is None else {}
        if error is not None:
            log.error("%s failed: %s", job.task["action"], error)
            if job.task["action"] == states.RESIZE:
                self.restore_claim(spec, job.task)
        for _ in range(END_ATTEMPTS):
            read = machine.read(spec["host"], uuid)
            task = (read.record or {}).get("task")
            if read.state not in states.TRANSIENT or not task or task["id"] != job.task["id"]:
                break  # a destroy (or the controller) took it over
            entry = store.get(store.keys.spec(spec["host"], uuid))
            if action_txn.end_action(store, read, entry, error, result.get("ip"),
                                     result.get("detail")) is not None:
                ended = machine.read(spec["host"], uuid).state
                log.info("%s %s: %s", job.task["action"], "done" if error is None else "failed",
                         ended)
                if ended == states.ACTIVE:
                    machine.consoles.follow(spec["host"], uuid)
                break
        machine.reread_later(spec)  # a request written meanwhile is looked at now

    def restore_claim(self, spec: dict[str, Any], task: dict[str, Any]) -> None:
        """A resize failed: the claim back to the size the instance still has."""
        allocations = spec.get("allocations") or {spec["host"]: {"resources": spec["resources"]}}
        hold = (task.get("hold") or {}).get("consumer")  # freed too: nothing to confirm
        if claims.restore(self.placement, spec["uuid"], spec["host"], task["resources"],
                          allocations, hold):
            instance_log(spec["uuid"]).info("claim put back to %s",
                                            claims.describe(spec["resources"]))

    def abandon(self, job: Job, reason: str) -> None:
        """Recording the action's end failed unexpectedly: end it in error, changing nothing
        else (the guest stays; a restart would run the action again)."""
        read = self.machine.read(job.spec["host"], job.uuid)
        if read.state in states.TRANSIENT and (read.record or {}).get("task"):
            try:
                action_txn.end_action(self.store, read, None, reason)
            except Exception:  # noqa: BLE001 (the next start resumes it)
                instance_log(job.uuid).exception("could not end the %s either", job.kind)

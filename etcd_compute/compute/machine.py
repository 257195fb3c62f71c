"""The compute side of an instance's life: spec arrived -> job -> end state.

Everything here runs in the daemon's main thread (`service.py` calls it
from its event loop), so there is no locking: a spec event, a finished job
or a re-read is handled one at a time. Each end state is one transaction of
the instance model (`instances/host.py`); each job is a driver call in the worker
pool. Handlers that lose a race (a compare failed) re-read the spec and act
on what is there now.

Built against small interfaces (store, Placement, pool, consoles, `post`), so it runs
against in-memory fakes in the unit tests. Its parts get what they use of it through
`parts.Machine`: an operator's action (`actions.py`), a job's end written (`ends.py`).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from typing import Any

from etcd_compute import claims
from etcd_compute.compute import checks, worker
from etcd_compute.compute import metrics as compute_metrics
from etcd_compute.compute.actions import LifecycleActions
from etcd_compute.compute.consoles import Consoles
from etcd_compute.compute.ends import EVACUABLE, InstanceEnds
from etcd_compute.compute.fencing import Gate
from etcd_compute.compute.identity import HostIdentity
from etcd_compute.compute.moves import InstanceMoves
from etcd_compute.compute.plugging import PlugWaits
from etcd_compute.compute.pool import (
    ACTION_KINDS,
    BUILD,
    CHECK,
    CLEANUP,
    DESTROY,
    MOVE_KINDS,
    Job,
    WorkerPool,
    job_error,
    pool_broke,
)
from etcd_compute.errors import InvalidMessage, RequestError, ServiceUnavailable
from etcd_compute.etcd import KeyValueStore
from etcd_compute.instances import host as host_txn
from etcd_compute.instances import ownership, records, states
from etcd_compute.keys import UUID
from etcd_compute.placement import PlacementClient

LOG = logging.getLogger("etcd_compute.compute")

Post = Callable[[Callable[..., None], tuple[Any, ...]], None]


def _ing(kind: str) -> str:
    """'building', 'stopping', 'rebooting'... for log lines."""
    return {"stop": "stopping", "reboot": "rebooting"}.get(kind, kind.rstrip("e") + "ing")


# A spec whose claim is on another host for now (a move in flight), or could not be checked
# (Placement unreachable), is looked at again after this; a claim still on another host
# after CLAIM_WAIT_SECONDS ends the instance in ERROR (the move's undo failed: this host
# never builds it without its claim, and never frees another host's).
CLAIM_RECHECK_SECONDS = 1.0
CLAIM_WAIT_SECONDS = 60.0
Later = Callable[..., None]


def _after(seconds: float, function: Callable[..., None], *args: Any) -> None:
    timer = threading.Timer(seconds, function, args)
    timer.daemon = True
    timer.start()


def instance_log(uuid: str) -> logging.LoggerAdapter:
    """A logger whose every line names the instance."""
    return logging.LoggerAdapter(LOG, {"instance": uuid})


class InstanceMachine:
    def __init__(self, store: KeyValueStore, placement: PlacementClient, pool: WorkerPool,
                 consoles: Consoles, hosts: dict[str, HostIdentity], settings: dict[str, Any],
                 post: Post, stopping: threading.Event, gate: Gate | None = None,
                 later: Later | None = None, claim_checks: checks.ClaimChecks | None = None,
                 vif_plugging: dict[str, Any] | None = None):
        self.store = store
        self.keys = store.keys
        self.placement = placement
        self.pool = pool
        self.consoles = consoles
        self.hosts = hosts
        self.settings = settings
        # Queue a follow-up event for the main loop (re-reads after a lost race).
        self.post = post
        # Call something after a delay (a claim to look at again).
        self.later = later or _after
        self.stopping = stopping
        # Where a build's claim is checked while its image is fetched (off the main loop).
        self.claim_checks = claim_checks or checks.ClaimChecks(placement, checks.ThreadRunner())
        # Since when (time.monotonic()) an instance's claim has been on another host.
        self.claim_waits: dict[str, float] = {}
        # Closed while the host is fenced: nothing starts; reconcile resumes it after.
        self.gate = gate or Gate()
        # Instances with a job in a worker, by uuid.
        self.jobs: dict[str, Job] = {}
        # When the last job of each instance ended (time.monotonic()): a power state seen
        # before that is stale.
        self.settled: dict[str, float] = {}
        # Ask the hypervisor how an instance's guest is powered now: wired by the service
        # (compute/power.py's PowerSync.check) once both exist.
        self.power_check: Callable[[str], None] = lambda _uuid: None
        self.actions = LifecycleActions(self)
        self.ends = InstanceEnds(self)
        self.moves = InstanceMoves(self)
        # Builds on Neutron ports waiting for network-vif-plugged (`network.neutron`).
        self.plugging = PlugWaits(store, self.jobs, post, self.later, self.on_job_done,
                                  vif_plugging)

    # ---------------------------------------------------------------- specs

    def on_spec(self, rp_uuid: str, uuid: str, raw: bytes, spec_revision: int) -> None:
        """A spec at /hosts/<rp_uuid>/<uuid> (new, changed, or listed by reconcile)."""
        if self.gate.closed:
            return  # fenced: the reconcile after the fence lifts acts on it
        try:
            spec = records.spec_at(rp_uuid, uuid, raw)
        except InvalidMessage as exc:
            self.reject(rp_uuid, uuid, spec_revision, str(exc))
            return
        if spec["action"] == "build":
            self.start_build(spec, spec_revision)
        elif spec["action"] == "evacuate":
            self.start_evacuate(spec)
        elif spec["action"] == states.MIGRATE:
            self.moves.on_migrate(spec, spec_revision)
        elif spec["action"] == states.INCOMING_ACTION:
            self.moves.on_incoming(spec, spec_revision)
        elif spec["action"] in states.ACTIONS:
            self.actions.on_request(spec, spec_revision)
        else:
            instance_log(uuid).info("destroy requested")
            self.start_destroy(spec)

    def reread_spec(self, rp_uuid: str, uuid: str) -> None:
        entry = self.store.get(self.keys.spec(rp_uuid, uuid))
        if entry is not None:
            self.on_spec(rp_uuid, uuid, entry.value, entry.mod_revision)

    def reread_later(self, spec: dict[str, Any]) -> None:
        self.post(self.reread_spec, (spec["host"], spec["uuid"]))

    def read(self, rp_uuid: str, uuid: str) -> records.RecordRead:
        read = records.read_record(self.store, rp_uuid, uuid)
        if read.fault:
            instance_log(uuid).warning("status record unreadable (%s); rewriting it", read.fault)
        return read

    def reject(self, rp_uuid: str, uuid: str, spec_revision: int, reason: str) -> None:
        """A spec we cannot act on: ERROR with the reason, free the claim, drop the key."""
        log = instance_log(uuid)
        if not UUID.match(uuid):
            key = self.keys.spec(rp_uuid, uuid)
            log.error("dropping %s: not an instance key (%s)", key, reason)
            ownership.drop_key(self.store, key, spec_revision)
            return
        read = self.read(rp_uuid, uuid)
        if read.state == states.DELETED:
            return
        log.error("rejected: %s", reason)
        if uuid in self.jobs or read.state in states.LIVE:
            # Garbage over an instance that may exist: tear it down like a failed build.
            running = self.jobs.pop(uuid, None)
            if running is not None:
                running.future.cancel()
            self.consoles.forget(uuid)
            self.submit(CLEANUP, {"uuid": uuid, "host": rp_uuid}, read.revision,
                        reason=reason, blame_host=False)
            return
        claims.free_here(self.placement, uuid, rp_uuid)  # never another host's claim
        host_txn.reject(self.store, rp_uuid, uuid, spec_revision, reason)

    def start_build(self, spec: dict[str, Any], spec_revision: int) -> None:
        """BUILDING at once, then the claim checked beside the image fetch (CHECK); the
        build is submitted when that holds (`_checked`). A spec with no record here is
        not the scheduler's: its claim is checked before anything is written."""
        uuid, log = spec["uuid"], instance_log(spec["uuid"])
        if uuid in self.jobs or self.stopping.is_set():
            return
        read = self.read(spec["host"], uuid)
        if read.state in (states.ACTIVE, states.SHUTOFF, states.ERROR,
                          states.DELETED, states.DELETING, states.RESCHEDULING) or \
                read.state in states.TRANSIENT:
            log.debug("already %s; nothing to do", read.state)
            return
        host = self.hosts[spec["host"]]
        revision = read.revision
        if read.state == states.BUILDING and read.record and \
                read.record["host"] == spec["host"]:
            log.info("resuming build interrupted by a restart: checking its claim first")
        else:
            if read.record is None and checks.check_unrecorded(
                    self.store, self.placement, spec, spec_revision) == checks.REFUSED:
                return
            revision = host_txn.begin_build(self.store, spec, spec_revision, read, host.name)
            if revision is None:
                # Someone moved first (a destroy, or another delivery): act on what is there now.
                self.reread_later(spec)
                return
            if read.record is None:
                self._build(spec, revision)  # checked above
                return
        self.submit(CHECK, spec, revision)

    def _build(self, spec: dict[str, Any], record_revision: int,
               started: float | None = None) -> None:
        """The claim is held: the build, the first thing that defines anything of the guest."""
        uuid, log = spec["uuid"], instance_log(spec["uuid"])
        self.claim_waits.pop(uuid, None)
        log.info("INSTANTIATE INSTANCE %s WITH IMAGE %s", uuid,
                 spec.get("image", {}).get("url", "(default)"))
        log.info("ALLOCATIONS ARE %s", spec.get("allocations", {spec["host"]: {
            "resources": spec["resources"]}}))
        self.submit(BUILD, spec, record_revision, started=started)

    def _checked(self, job: Job) -> None:
        """A build's claim check (and image fetch) ended: build, look again, or refuse into
        ERROR with the reason (through a cleanup: a resumed build may have left parts)."""
        spec, uuid, log = job.spec, job.uuid, instance_log(job.uuid)
        if job.future.cancelled():
            self.reread_later(spec)  # not by a destroy (that is handled before): again
            return
        exc = job.future.exception()
        if isinstance(exc, ServiceUnavailable):
            log.warning("claim not checked (%s); trying again in %g s", exc,
                        CLAIM_RECHECK_SECONDS)
            self.later(CLAIM_RECHECK_SECONDS, self.reread_later, spec)
            return
        if exc is not None:
            raise exc  # ends it in ERROR (`_abandon`): never built unchecked
        holding: claims.Holding = job.future.result()
        if self.stopping.is_set():
            return  # shutting down: the next start resumes it (and checks again)
        if holding.held:
            self._build(spec, job.record_revision, started=job.started)
            return
        reason = f"refused: {holding.why()}"
        if holding.verdict == claims.OTHER_HOST:
            since = self.claim_waits.setdefault(uuid, time.monotonic())
            if time.monotonic() - since < CLAIM_WAIT_SECONDS:
                log.info("claimed on %s for now (a move in flight?); looking again shortly",
                         holding.elsewhere)
                self.later(CLAIM_RECHECK_SECONDS, self.reread_later, spec)
                return
            reason += f" (for {CLAIM_WAIT_SECONDS:g} s)"
        self.claim_waits.pop(uuid, None)
        log.error("%s", reason)
        self.submit(CLEANUP, spec, job.record_revision, reason=reason, blame_host=False)

    def start_destroy(self, spec: dict[str, Any]) -> None:
        uuid, log = spec["uuid"], instance_log(spec["uuid"])
        job = self.jobs.get(uuid)
        self.consoles.forget(uuid)
        if job is not None:
            if job.kind != DESTROY and not job.destroy_requested:
                job.destroy_requested = True
                if job.kind != worker.MIGRATE:  # a move's end decides (moves.ended_elsewhere)
                    self._mark_deleting(spec)
                if job.kind in MOVE_KINDS:
                    self.moves.cancel(uuid)  # not killed with its worker (moves.cancel)
                elif job.kind != CLEANUP:
                    # Cancelling a running pebble task stops its worker; destroy cleans up.
                    job.future.cancel()
                    log.info("destroy while %s: %s cancelled", _ing(job.kind), job.kind)
                else:
                    log.info("destroy while cleaning up a failed build: it ends DELETED")
            return
        read = self.read(spec["host"], uuid)
        if read.record is None and read.fault is None:
            # No instance of ours by that uuid: a destroy written under the wrong host must
            # not free the real host's claim nor touch anything of it.
            log.error("refused: destroy of an instance this host does not hold; spec %s "
                      "dropped", self.keys.spec(spec["host"], uuid))
            entry = self.store.get(self.keys.spec(spec["host"], uuid))
            if entry is not None:
                ownership.drop_key(self.store, entry.key, entry.mod_revision)
            return
        if read.state == states.DELETED:
            self.ends.finish_destroy(spec)  # idempotent: make sure nothing is left
            return
        if not self.moves.destroyed_where_it_lands(read):  # else the hand-over carries it
            self.submit(DESTROY, spec, self._mark_deleting(spec))

    def start_evacuate(self, spec: dict[str, Any]) -> None:
        """A drain asks this host to give the instance up: the guest goes (powered off,
        removed here), then the record is handed over (RESCHEDULING) with its claim for
        the controller to place elsewhere: it never runs in two places at once."""
        uuid, log = spec["uuid"], instance_log(spec["uuid"])
        read = self.read(spec["host"], uuid)
        if read.state not in EVACUABLE:
            log.info("evacuate asked while %s: nothing to do", read.state)
            return
        self.consoles.forget(uuid)
        job = self.jobs.get(uuid)
        if job is not None:
            if job.kind in (CHECK, BUILD) and not job.destroy_requested:
                job.destroy_requested = job.hand_over = True
                job.future.cancel()
            return
        log.info("evacuating: removing the guest here, then handing it over")
        self.submit(DESTROY, spec, read.revision, hand_over=True)

    def _mark_deleting(self, spec: dict[str, Any]) -> int:
        read = self.read(spec["host"], spec["uuid"])
        if read.state == states.DELETING:
            return read.revision
        written = host_txn.mark_deleting(self.store, spec, read)
        return written if written is not None else self.read(spec["host"], spec["uuid"]).revision

    # ----------------------------------------------------------------- jobs

    def submit(self, kind: str, spec: dict[str, Any], record_revision: int,
               reason: str | None = None, attempt: int = 1, blame_host: bool = True,
               hand_over: bool = False, task: dict[str, Any] | None = None,
               started: float | None = None) -> None:
        uuid = spec["uuid"]
        timeout = self.settings["job_timeout_seconds"]
        with self.gate.lock:
            if self.gate.closed:
                return  # fenced: the reconcile after the fence lifts resumes it
            if kind == CHECK:
                future = checks.verified(self.claim_checks.start(spec, spec["resources"], timeout),
                                  self.pool.schedule(worker.prefetch, spec, timeout=timeout))
            elif kind == BUILD:
                future = self.pool.schedule(worker.build, spec, timeout=timeout)
            elif kind in ACTION_KINDS:
                future = self.pool.schedule(worker.act, spec, task, timeout=timeout)
            elif kind in MOVE_KINDS:
                future = self.moves.schedule(self.pool, kind, spec, task, timeout)
            else:
                future = self.pool.schedule(worker.destroy, uuid, timeout=timeout)
        job = Job(kind, uuid, spec, future, record_revision, reason=reason, attempt=attempt,
                  blame_host=blame_host, hand_over=hand_over, task=task)
        if started is not None:
            job.started = started  # a build's time counts from its claim check
        self.jobs[uuid] = job
        future.add_done_callback(lambda _f: self.post(self.on_job_done, (job,)))

    def forget_jobs(self, why: str) -> None:
        """Every job in flight is gone (its worker was stopped): forget them, so that the
        next reconcile starts each again; a late completion of one is then ignored."""
        for uuid, job in list(self.jobs.items()):
            instance_log(uuid).info("%s %s; resumed by the reconcile", job.kind, why)
            job.future.cancel()
            del self.jobs[uuid]

    def on_job_done(self, job: Job) -> None:
        compute_metrics.job_finished(job)
        if self.jobs.get(job.uuid) is not job:
            return  # cancelled or replaced meanwhile
        if self.gate.closed:
            # Fenced: its worker was stopped; the reconcile after the fence resumes it.
            del self.jobs[job.uuid]
            return
        # The job stays registered until its outcome is recorded: if etcd or Placement
        # fails half way, the service retries this same event and it is handled again.
        try:
            self._finish_job(job)
        except ServiceUnavailable:
            raise
        except Exception as exc:  # a bug here must not leave the instance stuck
            self._abandon(job, exc)
        if self.jobs.get(job.uuid) is job:
            del self.jobs[job.uuid]
            # What the hypervisor says about this guest from now on is not our own doing.
            self.settled[job.uuid] = time.monotonic()
            self.power_check(job.uuid)

    def _abandon(self, job: Job, exc: Exception) -> None:
        """Recording a job's outcome failed unexpectedly: end the instance in ERROR with the
        reason and free what it held, rather than leave it stuck until a restart."""
        log = instance_log(job.uuid)
        reason = f"internal error recording the {job.kind}: {exc.__class__.__name__}: {exc}"
        log.exception("%s", reason)
        compute_metrics.job_failed_internally(job)
        if job.kind == CLEANUP and (job.reason or "").startswith("internal error"):
            return  # it failed while ending an internal error: the next start reconciles it
        if job.kind in ACTION_KINDS:
            # A tenant's guest is not torn down for our bug: the action ends in error.
            self.actions.abandon(job, reason[:1000])
            return
        try:
            self.submit(CLEANUP, job.spec, job.record_revision, reason=reason[:1000],
                        blame_host=False)
        except Exception:  # noqa: BLE001 (the next start reconciles it)
            log.exception("could not clean up after that either")

    def _finish_job(self, job: Job) -> None:
        log = instance_log(job.uuid)
        if pool_broke(job.future) and job.attempt == 1:
            # Not the instance's fault: the pool lost its workers. Run it again once.
            if not self.pool.healthy():
                self.pool.replace("all workers died")
            self.submit(job.kind, job.spec, job.record_revision, reason=job.reason, attempt=2,
                        blame_host=job.blame_host, hand_over=job.hand_over, task=job.task)
            return
        error = job_error(job, self.settings["job_timeout_seconds"])
        if job.kind in ACTION_KINDS or job.kind in MOVE_KINDS:
            if not job.destroy_requested:
                (self.moves if job.kind in MOVE_KINDS else self.actions).finish(job, error)
            elif not self.moves.ended_elsewhere(job, error):
                self.submit(DESTROY, job.spec, self.read(job.spec["host"], job.uuid).revision)
        elif job.kind == CHECK:
            if job.destroy_requested:
                self.submit(DESTROY, job.spec, self.read(job.spec["host"], job.uuid).revision,
                            hand_over=job.hand_over)
            else:
                self._checked(job)
        elif job.kind == BUILD:
            if job.destroy_requested:
                self.submit(DESTROY, job.spec, self.read(job.spec["host"], job.uuid).revision,
                            hand_over=job.hand_over)
            elif error is None:
                if not self.plugging.wait_for(job):  # its ports up (or none): it ends now
                    self.ends.finish_build(job, job.future.result())
            else:
                # The request's own fault (its image, URL, size...) is not the host's: no
                # hand-over to another host, nothing counted against this one.
                request_fault = isinstance(job.future.exception(), RequestError)
                log.error("build failed: %s", error)
                # Remove whatever the failed build left before reporting ERROR.
                self.submit(CLEANUP, job.spec, job.record_revision, reason=error,
                            blame_host=not request_fault)
        elif job.kind == CLEANUP:
            if error is not None:
                log.error("cleanup after failed build also failed: %s", error)
            if job.destroy_requested:
                self.ends.finish_destroy(job.spec)
            else:
                self.ends.finish_failed_build(job)
        else:
            if error is not None:
                log.error("destroy failed: %s; it stays DELETING and is retried at next start",
                          error)
                return
            if job.hand_over:
                self.ends.finish_evacuate(job.spec)
            else:
                self.ends.finish_destroy(job.spec)

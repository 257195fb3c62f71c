"""The compute daemon's main process.

One thread (the caller of `run`) owns all decisions and every etcd write;
other threads only put events on `self.events`:

- the watch thread: etcd events under our /hosts/ prefix, resubscribed from
  the last seen revision + 1 after any error;
- the heartbeat thread: keeps the lease that holds our /alive/ keys;
- pool callbacks: a build or destroy job finished, failed, timed out or
  its worker died.

Exactly once: a build starts only through a transaction that moves the
instance record to BUILDING at the revision we read, and drivers are
idempotent per instance uuid, so re-delivered events and restarts never
build twice. Reconciliation at every start (and after etcd compacted the
history we needed) lists our prefix and finishes whatever is pending.
"""

from __future__ import annotations

import concurrent.futures
import concurrent.futures.process
import contextlib
import logging
import multiprocessing
import queue
import signal
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

import pebble
import pyetcd.events
import pyetcd.exceptions

from etcd_compute import messages
from etcd_compute.compute import jobs, records
from etcd_compute.compute.identity import HostIdentity
from etcd_compute.compute.inventory import build_inventory, cpu_traits, measure_totals
from etcd_compute.errors import EtcdComputeError, InvalidMessage, ServiceUnavailable
from etcd_compute.etcd import ETCD_DOWN, Store
from etcd_compute.placement import PlacementClient

LOG = logging.getLogger("etcd_compute.compute")

DISABLED_TRAIT = "COMPUTE_STATUS_DISABLED"
# How many recent build failures a host reports to the scheduler.
FAILURES_KEPT = 20
CONSOLE_MAX_BYTES = 65536
CONSOLE_REFRESH_SECONDS = 5
# How long after ACTIVE a console keeps being republished.
CONSOLE_FOLLOW_SECONDS = 600
MDSERVER_CHECK_SECONDS = 30
# States in which the driver may hold the instance.
LIVE = frozenset({records.BUILDING, records.ACTIVE, records.DELETING})


def instance_log(uuid: str) -> logging.LoggerAdapter:
    """A logger whose every line names the instance."""
    return logging.LoggerAdapter(LOG, {"instance": uuid})


@dataclass
class ConsoleFollow:
    """A console being republished while the guest boots."""

    since: float = field(default_factory=time.monotonic)
    digest: int | None = None


@dataclass
class Job:
    """A driver call running in a worker process."""

    kind: str  # "build" | "destroy" | "cleanup"
    uuid: str
    spec: dict[str, Any]
    future: concurrent.futures.Future
    # Record revision when the job started; later writes compare against it.
    record_revision: int = 0
    # A destroy arrived while building: destroy as soon as the build is off.
    destroy_requested: bool = False
    reason: str | None = None
    attempt: int = 1
    # False when the request was at fault (a bad spec), not the host.
    blame_host: bool = True
    started: float = field(default_factory=time.monotonic)


class ComputeService:
    def __init__(self, config: dict[str, Any], hosts: list[HostIdentity]):
        self.config = config
        self.settings = config["compute"]
        self.hosts = {host.uuid: host for host in hosts}
        self.store = Store(config["etcd"])
        self.keys = self.store.keys
        self.placement = PlacementClient(config["placement"])
        self.events: queue.Queue[tuple[Callable[..., None], tuple[Any, ...]]] = queue.Queue()
        self.jobs: dict[str, Job] = {}
        self.stopping = threading.Event()
        self.lease: Any = None
        self.lease_lock = threading.Lock()
        # Next revision the watch must deliver; everything before is handled.
        self.next_revision = 0
        self.cancel_watch: Callable[[], None] | None = None
        self.pool: pebble.ProcessPool | None = None
        self.inventories: dict[str, dict[str, Any]] = {}
        # Consoles followed: recently ACTIVE instances here -> ConsoleFollow.
        self.consoles: dict[str, ConsoleFollow] = {}
        # One watch covers all our hosts: the host's own prefix, or all of /hosts/
        # when one process simulates many.
        self.watch_prefix = (
            self.keys.host(next(iter(self.hosts))) if len(self.hosts) == 1 else self.keys.hosts()
        )

    # ------------------------------------------------------------------ life

    def run(self, install_signal_handlers: bool = True) -> int:
        if install_signal_handlers:
            signal.signal(signal.SIGTERM, self._on_signal)
            signal.signal(signal.SIGINT, self._on_signal)
        self.register()
        self.start_heartbeat()
        self.ensure_mdserver()
        self.pool = self._new_pool()
        self.reconcile()
        threading.Thread(target=self._watch_loop, name="watch", daemon=True).start()
        threading.Thread(target=self._timer_loop, name="timer", daemon=True).start()
        LOG.info("compute ready: %d host(s), driver %s, watching %s from revision %d",
                 len(self.hosts), self.config["driver"]["name"], self.watch_prefix,
                 self.next_revision)
        self._main_loop()
        self.shutdown()
        return 0

    def _new_pool(self) -> pebble.ProcessPool:
        return pebble.ProcessPool(
            max_workers=self.settings["workers"],
            initializer=jobs.init_worker,
            initargs=(self.config,),
            # Workers must not inherit the main process's gRPC threads.
            context=multiprocessing.get_context("forkserver"),
        )

    def schedule_job(self, function: Callable[..., Any], *args: Any,
                     timeout: float) -> concurrent.futures.Future:
        """Run `function(*args)` in a worker; rebuild the pool if a dead worker broke it."""
        assert self.pool is not None
        try:
            return self.pool.schedule(function, args=args, timeout=timeout)
        except RuntimeError as exc:
            self._replace_pool(str(exc))
            return self.pool.schedule(function, args=args, timeout=timeout)

    def _replace_pool(self, why: str) -> None:
        LOG.error("worker pool broken (%s); starting a new one", why)
        broken, self.pool = self.pool, self._new_pool()
        # Its remaining futures fail or cancel, which ends their jobs like any failure.
        threading.Thread(target=broken.stop, name="stop-broken-pool", daemon=True).start()

    def _on_signal(self, signum: int, _frame: Any) -> None:
        LOG.info("received %s: finishing in-flight jobs, then stopping",
                 signal.Signals(signum).name)
        self.stop()

    def stop(self) -> None:
        self.stopping.set()
        self.events.put((lambda: None, ()))

    def _main_loop(self) -> None:
        while not self.stopping.is_set():
            try:
                handler, args = self.events.get(timeout=1.0)
            except queue.Empty:
                continue
            self._dispatch(handler, args)

    def _dispatch(self, handler: Callable[..., None], args: tuple[Any, ...]) -> None:
        try:
            handler(*args)
        except ServiceUnavailable as exc:
            # etcd or Placement is down: retry the same event shortly.
            LOG.warning("%s; retrying in 1 s", exc)
            threading.Timer(1.0, self.events.put, ((handler, args),)).start()
        except Exception:
            LOG.exception("unexpected error handling %s", getattr(handler, "__name__", handler))

    def shutdown(self) -> None:
        """Let in-flight jobs finish (bounded), make hosts unschedulable, drop the lease."""
        if self.cancel_watch:
            with contextlib.suppress(Exception):
                self.cancel_watch()
        deadline = time.monotonic() + self.settings["shutdown_timeout_seconds"]
        while self.jobs and time.monotonic() < deadline:
            try:
                handler, args = self.events.get(timeout=0.2)
            except queue.Empty:
                continue
            if handler in (self.on_job_done,):
                self._dispatch(handler, args)
        if self.jobs:
            LOG.warning("%d job(s) still running at shutdown; the next start resumes them",
                        len(self.jobs))
        for host in self.hosts.values():
            try:
                self.set_disabled(host.uuid, True)
            except EtcdComputeError as exc:
                LOG.warning("could not disable provider %s: %s", host.uuid, exc)
        with contextlib.suppress(Exception), self.lease_lock:
            if self.lease is not None:
                self.lease.revoke()
        if self.pool is not None:
            self.pool.stop()
            with contextlib.suppress(Exception):
                self.pool.join(timeout=5)
        self.store.close()
        LOG.info("compute stopped")

    # ---------------------------------------------------------- registration

    def register(self) -> None:
        """Create or reuse our providers, reset inventory, traits and aggregates."""
        totals = measure_totals(self.settings["instances_dir"])
        inventory = build_inventory(totals, self.settings["inventory"])
        wanted = cpu_traits() | set(self.settings["traits"])
        traits = self.placement.known_traits(wanted) | set(self.settings["traits"])

        def register_one(host: HostIdentity) -> None:
            # Each write returns the provider's next generation: no re-reads.
            generation = self.placement.ensure_provider(host.uuid, host.name)["generation"]
            generation = self.placement.set_inventory(host.uuid, inventory, generation)
            # Setting the full list also clears COMPUTE_STATUS_DISABLED from a stop.
            generation = self.placement.set_traits(host.uuid, traits, generation)
            self.placement.set_aggregates(host.uuid, self.settings["aggregates"], generation)
            self.inventories[host.uuid] = inventory

        self.placement.ensure_custom_traits(traits)
        if len(self.hosts) == 1:
            register_one(next(iter(self.hosts.values())))
        else:
            # Placement handles a few concurrent writers fine; 1000 sequential hosts are slow.
            with ThreadPoolExecutor(max_workers=8) as executor:
                list(executor.map(register_one, self.hosts.values()))
        self.traits = traits
        LOG.info("registered %d provider(s) in Placement: %s", len(self.hosts),
                 ", ".join(f"{k}={v['total']}" for k, v in inventory.items()))

    def refresh_inventory(self) -> None:
        """Re-measure and push inventory when it changed (generation conflicts retried)."""
        totals = measure_totals(self.settings["instances_dir"])
        inventory = build_inventory(totals, self.settings["inventory"])
        for host in self.hosts.values():
            if self.inventories.get(host.uuid) != inventory:
                self.placement.set_inventory(host.uuid, inventory)
                self.inventories[host.uuid] = inventory
                LOG.info("inventory of %s updated", host.name)

    def set_disabled(self, rp_uuid: str, disabled: bool) -> None:
        traits = self.placement.get_traits(rp_uuid)
        traits = traits | {DISABLED_TRAIT} if disabled else traits - {DISABLED_TRAIT}
        self.placement.set_traits(rp_uuid, traits)

    def ensure_mdserver(self) -> None:
        """Start the metadata server for our guests if it is not running (libvirt only)."""
        if self.config["driver"]["name"] != "libvirt":
            return
        from etcd_compute.mdserver import ensure_mdserver

        pid = ensure_mdserver(self.config)
        if pid:
            LOG.debug("metadata server running (pid %d)", pid)

    # ------------------------------------------------------------- heartbeat

    def start_heartbeat(self) -> None:
        self._new_lease()
        threading.Thread(target=self._heartbeat_loop, name="heartbeat", daemon=True).start()

    def _new_lease(self) -> None:
        ttl = self.settings["heartbeat_ttl"]
        with self.lease_lock:
            self.lease = self.store.lease(ttl)
            now = time.time()
            for host in self.hosts.values():
                self.store.put(
                    messages.ALIVE, self.keys.alive(host.uuid),
                    {"host": host.uuid, "name": host.name, "since": now,
                     "driver": self.config["driver"]["name"]},
                    lease=self.lease,
                )

    def _heartbeat_loop(self) -> None:
        interval = max(self.settings["heartbeat_ttl"] / 3, 0.5)
        while not self.stopping.wait(interval):
            try:
                with self.lease_lock:
                    response = list(self.lease.refresh())[0]
                if response.TTL <= 0:
                    LOG.warning("heartbeat lease expired; taking a new one")
                    self._new_lease()
            except ETCD_DOWN + (ServiceUnavailable, IndexError):
                LOG.warning("heartbeat: etcd unreachable; retrying")
            except Exception:
                LOG.exception("heartbeat failed")

    # ------------------------------------------------------------------ timer

    def _timer_loop(self) -> None:
        refresh_every = self.settings["inventory_refresh_seconds"]
        next_refresh = time.monotonic() + refresh_every
        next_mdserver_check = time.monotonic() + MDSERVER_CHECK_SECONDS
        next_console = time.monotonic() + CONSOLE_REFRESH_SECONDS
        while not self.stopping.wait(1.0):
            if time.monotonic() >= next_console:
                next_console = time.monotonic() + CONSOLE_REFRESH_SECONDS
                self.events.put((self.refresh_consoles, ()))
            if time.monotonic() >= next_refresh:
                next_refresh = time.monotonic() + refresh_every
                self.events.put((self.refresh_inventory, ()))
            if time.monotonic() >= next_mdserver_check:
                # If the metadata server died, guests booting now would miss it.
                next_mdserver_check = time.monotonic() + MDSERVER_CHECK_SECONDS
                self.events.put((self.ensure_mdserver, ()))

    # ------------------------------------------------------------------ watch

    def _watch_loop(self) -> None:
        while not self.stopping.is_set():
            start = self.next_revision
            try:
                responses, cancel = self.store.client.watch_prefix_response(
                    self.watch_prefix, start_revision=start
                )
                self.cancel_watch = cancel
                for response in responses:
                    for event in response.events:
                        self.next_revision = max(self.next_revision, event.mod_revision + 1)
                        self.events.put((self.on_watch_event, (event,)))
                    if self.stopping.is_set():
                        break
            except pyetcd.exceptions.RevisionCompactedError as exc:
                LOG.warning("etcd compacted history past revision %d; reconciling", start)
                done = threading.Event()
                self.events.put((self._reconcile_then, (done,)))
                done.wait()
                del exc
            except ETCD_DOWN + (ServiceUnavailable,) as exc:
                if not self.stopping.is_set():
                    LOG.warning("watch lost (%s); resubscribing from revision %d",
                                exc.__class__.__name__, self.next_revision)
                    self.stopping.wait(1.0)
            except Exception:
                LOG.exception("watch failed; resubscribing from revision %d", self.next_revision)
                self.stopping.wait(1.0)

    def _reconcile_then(self, done: threading.Event) -> None:
        try:
            self.reconcile()
        finally:
            done.set()

    def on_watch_event(self, event: Any) -> None:
        key = event.key.decode()
        parsed = self.keys.parse_host_instance(key)
        if parsed is None or parsed[0] not in self.hosts:
            return
        if isinstance(event, pyetcd.events.DeleteEvent):
            return  # we delete host keys ourselves when an instance is gone
        self.on_spec(parsed[0], parsed[1], event.value, event.mod_revision)

    # ------------------------------------------------------------- reconcile

    def reconcile(self) -> None:
        """Compare etcd, records and the driver; finish what is pending; report orphans."""
        entries, revision = self.store.get_prefix(self.watch_prefix)
        wanted: set[str] = set()
        for entry in entries:
            parsed = self.keys.parse_host_instance(entry.key)
            if parsed is None or parsed[0] not in self.hosts:
                continue
            wanted.add(parsed[1])
            self.on_spec(parsed[0], parsed[1], entry.value, entry.mod_revision)
        self.next_revision = max(self.next_revision, revision + 1)
        try:
            held = self._run_sync(jobs.list_instances)
        except Exception as exc:  # a broken driver must not stop the daemon
            LOG.warning("reconcile: could not list driver instances: %s", exc)
            return
        in_flight = set(self.jobs)
        for uuid in sorted(held - wanted - in_flight):
            instance_log(uuid).warning(
                "orphan: the driver holds instance %s but no spec asks for it", uuid
            )
        LOG.info("reconciled %d spec(s) at revision %d; %d instance(s) in the driver",
                 len(wanted), revision, len(held))

    def _run_sync(self, function: Callable[..., Any], *args: Any) -> Any:
        return self.schedule_job(function, *args, timeout=60).result()

    # ------------------------------------------------------------------ specs

    def on_spec(self, rp_uuid: str, uuid: str, raw: bytes, spec_revision: int) -> None:
        log = instance_log(uuid)
        try:
            spec = messages.decode(messages.INSTANCE_SPEC, raw)
            if spec["uuid"] != uuid or spec["host"] != rp_uuid:
                raise InvalidMessage(
                    f"instance_spec: uuid/host {spec['uuid']}/{spec['host']} do not match "
                    f"key {rp_uuid}/{uuid}"
                )
        except InvalidMessage as exc:
            self.reject(rp_uuid, uuid, spec_revision, str(exc))
            return
        if spec["action"] == "build":
            self.start_build(spec, spec_revision)
        else:
            log.info("destroy requested")
            self.start_destroy(spec)

    def reject(self, rp_uuid: str, uuid: str, spec_revision: int, reason: str) -> None:
        """A spec we cannot act on: ERROR with the reason, free the claim, drop the key."""
        log = instance_log(uuid)
        host_key = self.keys.host_instance(rp_uuid, uuid)
        if not _is_uuid(uuid):
            log.error("dropping %s: not an instance key (%s)", host_key, reason)
            self.store.transaction([self.store.tx.mod(host_key) == spec_revision],
                                   [self.store.delete_op(host_key)])
            return
        record, record_revision = self._read_record(uuid)
        if record and record["state"] == records.DELETED:
            return
        log.error("rejected: %s", reason)
        if uuid in self.jobs or (record and record["state"] in LIVE):
            # Garbage over an instance that may exist: tear it down like a failed build.
            running = self.jobs.pop(uuid, None)
            if running is not None:
                running.future.cancel()
            self.consoles.pop(uuid, None)
            self.submit("cleanup", {"uuid": uuid, "host": rp_uuid}, record_revision,
                        reason=reason, blame_host=False)
            return
        self.placement.delete_allocations(uuid)
        self.store.transaction(
            [self.store.tx.mod(host_key) == spec_revision],
            [
                self.store.put_op(messages.INSTANCE_RECORD, self.keys.instance(uuid),
                                  records.error_record(uuid, rp_uuid, reason)),
                self.store.delete_op(host_key),
            ],
        )

    def _read_record(self, uuid: str) -> tuple[dict[str, Any] | None, int]:
        try:
            return self.store.read(messages.INSTANCE_RECORD, self.keys.instance(uuid))
        except InvalidMessage as exc:
            instance_log(uuid).warning("status record unreadable (%s); rewriting it", exc)
            entry = self.store.get(self.keys.instance(uuid))
            return None, entry.mod_revision if entry else 0

    def start_build(self, spec: dict[str, Any], spec_revision: int) -> None:
        uuid, log = spec["uuid"], instance_log(spec["uuid"])
        if uuid in self.jobs or self.stopping.is_set():
            return
        record, record_revision = self._read_record(uuid)
        state = record["state"] if record else None
        if state in (records.ACTIVE, records.ERROR, records.DELETED, records.DELETING):
            log.debug("already %s; nothing to do", state)
            return
        host = self.hosts[spec["host"]]
        if state == records.BUILDING and record and record["host"] == spec["host"]:
            log.info("resuming build interrupted by a restart")
        else:
            building = (records.moved(record, records.BUILDING, host=spec["host"],
                                      host_name=host.name)
                        if record else records.from_spec(spec, records.BUILDING, host.name))
            host_key = self.keys.host_instance(spec["host"], uuid)
            revision = self.store.transaction(
                [self.store.unchanged(self.keys.instance(uuid), record_revision),
                 self.store.tx.mod(host_key) == spec_revision],
                [self.store.put_op(messages.INSTANCE_RECORD, self.keys.instance(uuid), building)],
            )
            if revision is None:
                # Someone moved first (a destroy, or another delivery): act on what is there now.
                self.events.put((self.reread_spec, (spec["host"], uuid)))
                return
            record_revision = revision
        log.info("INSTANTIATE INSTANCE %s WITH IMAGE %s", uuid,
                 spec.get("image", {}).get("url", "(default)"))
        log.info("ALLOCATIONS ARE %s", spec.get("allocations", {spec["host"]: {
            "resources": spec["resources"]}}))
        self.submit("build", spec, record_revision)

    def reread_spec(self, rp_uuid: str, uuid: str) -> None:
        entry = self.store.get(self.keys.host_instance(rp_uuid, uuid))
        if entry is not None:
            self.on_spec(rp_uuid, uuid, entry.value, entry.mod_revision)

    def start_destroy(self, spec: dict[str, Any]) -> None:
        uuid, log = spec["uuid"], instance_log(spec["uuid"])
        job = self.jobs.get(uuid)
        self.consoles.pop(uuid, None)
        if job is not None:
            if job.kind == "build" and not job.destroy_requested:
                job.destroy_requested = True
                self._mark_deleting(spec)
                # Cancelling a running pebble task stops its worker; destroy cleans up after.
                job.future.cancel()
                log.info("destroy while building: build cancelled")
            return
        record, _ = self._read_record(uuid)
        if record and record["state"] == records.DELETED:
            self.finish_destroy(spec)  # idempotent: make sure nothing is left
            return
        revision = self._mark_deleting(spec)
        self.submit("destroy", spec, revision)

    def _mark_deleting(self, spec: dict[str, Any]) -> int:
        uuid = spec["uuid"]
        record, revision = self._read_record(uuid)
        if record and record["state"] == records.DELETING:
            return revision
        deleting = (records.moved(record, records.DELETING) if record
                    else records.from_spec(spec, records.DELETING))
        written = self.store.transaction(
            [self.store.unchanged(self.keys.instance(uuid), revision)],
            [self.store.put_op(messages.INSTANCE_RECORD, self.keys.instance(uuid), deleting)],
        )
        return written if written is not None else self._read_record(uuid)[1]

    # -------------------------------------------------------------------- jobs

    def _pool_healthy(self) -> bool:
        assert self.pool is not None
        try:
            self.pool._check_pool_status()  # pebble has no public health check
        except RuntimeError:
            return False
        return True

    def submit(self, kind: str, spec: dict[str, Any], record_revision: int,
               reason: str | None = None, attempt: int = 1, blame_host: bool = True) -> None:
        uuid = spec["uuid"]
        timeout = self.settings["job_timeout_seconds"]
        if kind == "build":
            future = self.schedule_job(jobs.build, spec, timeout=timeout)
        else:
            future = self.schedule_job(jobs.destroy, uuid, timeout=timeout)
        job = Job(kind, uuid, spec, future, record_revision, reason=reason, attempt=attempt,
                  blame_host=blame_host)
        self.jobs[uuid] = job
        future.add_done_callback(lambda _f: self.events.put((self.on_job_done, (job,))))

    def on_job_done(self, job: Job) -> None:
        if self.jobs.get(job.uuid) is not job:
            return  # cancelled or replaced meanwhile
        # The job stays registered until its outcome is recorded: if etcd or Placement
        # fails half way, `_dispatch` retries this same event and it is handled again.
        self._finish_job(job)
        if self.jobs.get(job.uuid) is job:
            del self.jobs[job.uuid]

    def _finish_job(self, job: Job) -> None:
        log = instance_log(job.uuid)
        if _pool_broke(job.future) and job.attempt == 1:
            # Not the instance's fault: the pool lost its workers. Run it again once.
            if self.pool is not None and not self._pool_healthy():
                self._replace_pool("all workers died")
            self.submit(job.kind, job.spec, job.record_revision, reason=job.reason, attempt=2,
                        blame_host=job.blame_host)
            return
        error = _job_error(job, self.settings["job_timeout_seconds"])
        if job.kind == "build":
            if job.destroy_requested:
                self.submit("destroy", job.spec, self._read_record(job.uuid)[1])
            elif error is None:
                self.finish_build(job, job.future.result())
            else:
                log.error("build failed: %s", error)
                # Remove whatever the failed build left before reporting ERROR.
                self.submit("cleanup", job.spec, job.record_revision, reason=error)
        elif job.kind == "cleanup":
            if error is not None:
                log.error("cleanup after failed build also failed: %s", error)
            self.finish_failed_build(job)
        else:
            if error is not None:
                log.error("destroy failed: %s; it stays DELETING and is retried at next start",
                          error)
                return
            self.finish_destroy(job.spec)

    def finish_build(self, job: Job, result: dict[str, Any]) -> None:
        uuid, spec = job.uuid, job.spec
        record, revision = self._read_record(uuid)
        if record is None or record["state"] != records.BUILDING:
            # A destroy got in between; it owns the instance now.
            self.events.put((self.reread_spec, (spec["host"], uuid)))
            return
        ip = result.get("ip")
        success = [self.store.put_op(messages.INSTANCE_RECORD, self.keys.instance(uuid),
                                     records.moved(record, records.ACTIVE, ip=ip, error=None))]
        if ip:
            success.append(self.store.tx.put(self.keys.booted(uuid), ip))
        written = self.store.transaction(
            [self.store.tx.mod(self.keys.instance(uuid)) == revision], success
        )
        if written is None:
            self.events.put((self.reread_spec, (spec["host"], uuid)))
            return
        instance_log(uuid).info("ACTIVE ip=%s (build took %.1f s)", ip,
                                time.monotonic() - job.started)
        self.consoles[uuid] = ConsoleFollow()
        self.publish_consoles([uuid])

    def finish_failed_build(self, job: Job) -> None:
        uuid, spec = job.uuid, job.spec
        if job.blame_host and self.reschedule(job):
            return
        self.placement.delete_allocations(uuid)
        record, revision = self._read_record(uuid)
        failed = (records.moved(record, records.ERROR, error=job.reason) if record
                  else records.error_record(uuid, spec["host"], job.reason or "build failed"))
        ops = [self.store.put_op(messages.INSTANCE_RECORD, self.keys.instance(uuid), failed),
               *self._key_deletes(spec, uuid)]
        written = self.store.transaction(
            [self.store.unchanged(self.keys.instance(uuid), revision)], ops
        )
        if written is None:
            self.events.put((self.reread_spec, (spec["host"], uuid)))
            return
        if job.blame_host:
            self.record_build_failure(spec["host"])
        instance_log(uuid).error("ERROR: %s (allocation freed, nothing left)", job.reason)

    def _key_deletes(self, spec: dict[str, Any], uuid: str) -> list[Any]:
        """Deletes of every key an instance owns besides its record (one list, so no
        end state can forget one)."""
        keys = [self.keys.host_instance(spec["host"], uuid), self.keys.booted(uuid),
                self.keys.console(uuid)]
        if spec.get("group"):
            keys.append(self.keys.group_member(spec["group"]["name"], uuid))
        return [self.store.delete_op(key) for key in keys]

    def reschedule(self, job: Job) -> bool:
        """Hand a failed build to the next live alternate host the scheduler kept.

        The claim moves in one Placement call (we never hold neither host), then
        spec, record and group membership move in one etcd transaction.
        """
        uuid, spec, log = job.uuid, job.spec, instance_log(job.uuid)
        if "project_id" not in spec or "user_id" not in spec:
            return False
        record, revision = self._read_record(uuid)
        if record is None or record["state"] != records.BUILDING:
            return False
        for index, alternate in enumerate(spec.get("alternates") or []):
            host = alternate["host"]
            if self.store.get(self.keys.alive(host)) is None:
                log.info("alternate %s has no heartbeat; skipping it", host)
                continue
            current = self.placement.get_allocations(uuid)
            try:
                self.placement.claim(uuid, alternate["allocations"], spec["project_id"],
                                     spec["user_id"],
                                     consumer_generation=current.get("consumer_generation"))
            except EtcdComputeError as exc:
                log.info("alternate %s refused the claim (%s); trying the next", host, exc)
                continue
            moved_spec = {**spec, "host": host, "allocations": alternate["allocations"],
                          "alternates": spec["alternates"][index + 1:]}
            ops = [
                self.store.put_op(messages.INSTANCE_SPEC, self.keys.host_instance(host, uuid),
                                  moved_spec),
                self.store.put_op(messages.INSTANCE_RECORD, self.keys.instance(uuid),
                                  records.moved(record, records.SCHEDULED, host=host,
                                                host_name=None)),
                self.store.delete_op(self.keys.host_instance(spec["host"], uuid)),
            ]
            if spec.get("group"):
                ops.append(self.store.put_op(
                    messages.GROUP_MEMBER, self.keys.group_member(spec["group"]["name"], uuid),
                    {"host": host, "policy": spec["group"]["policy"]}))
            if self.store.transaction([self.store.unchanged(self.keys.instance(uuid), revision)],
                                      ops) is None:
                return False  # a destroy got in; the ERROR path frees the claim
            self.record_build_failure(spec["host"])
            log.warning("build failed here (%s); rescheduled to alternate host %s",
                        job.reason, host)
            return True
        return False

    def finish_destroy(self, spec: dict[str, Any]) -> None:
        uuid = spec["uuid"]
        self.consoles.pop(uuid, None)
        self.placement.delete_allocations(uuid)
        record, _ = self._read_record(uuid)
        deleted = (records.moved(record, records.DELETED, ip=None) if record
                   else records.from_spec(spec, records.DELETED))
        lease = self.store.lease(self.settings["deleted_record_ttl"])
        self.store.transaction([], [
            self.store.put_op(messages.INSTANCE_RECORD, self.keys.instance(uuid), deleted,
                              lease=lease),
            *self._key_deletes(spec, uuid),
        ])
        instance_log(uuid).info("DELETED (allocation freed)")

    # ------------------------------------------------------------ extras

    def record_build_failure(self, rp_uuid: str) -> None:
        """Tell the scheduler (via /stats/) that a build failed here."""
        key = self.keys.stats(rp_uuid)
        try:
            stats, _ = self.store.read(messages.HOST_STATS, key)
        except InvalidMessage:
            stats = None
        now = time.time()
        failures = [*(stats or {}).get("build_failures", []), now][-FAILURES_KEPT:]
        self.store.put(messages.HOST_STATS, key, {"build_failures": failures, "updated_at": now})

    def refresh_consoles(self) -> None:
        """Republish the consoles still followed (boot output), in one worker job."""
        now = time.monotonic()
        for uuid, follow in list(self.consoles.items()):
            if now - follow.since > CONSOLE_FOLLOW_SECONDS:
                del self.consoles[uuid]
        if self.consoles:
            self.publish_consoles(sorted(self.consoles))

    def publish_consoles(self, uuids: list[str]) -> None:
        """Put the tails of these serial logs on etcd for `schedule.py console`.

        Published at ACTIVE, then every few seconds while they change during the
        first minutes (boot), so the operator sees the boot without asking for it.
        """
        future = self.schedule_job(jobs.consoles, uuids, CONSOLE_MAX_BYTES, timeout=60)
        future.add_done_callback(lambda f: self.events.put((self._store_consoles, (f,))))

    def _store_consoles(self, future: concurrent.futures.Future) -> None:
        if future.cancelled() or future.exception() is not None:
            return
        for uuid, text in future.result().items():
            follow = self.consoles.get(uuid)
            if follow is None or follow.digest == hash(text):
                continue
            record, _ = self._read_record(uuid)
            if record is None or record["state"] != records.ACTIVE:
                self.consoles.pop(uuid, None)
                continue
            self.store.put(messages.CONSOLE, self.keys.console(uuid),
                           {"uuid": uuid, "text": text, "updated_at": time.time(),
                            "truncated": len(text.encode()) >= CONSOLE_MAX_BYTES})
            follow.digest = hash(text)


def _job_error(job: Job, timeout: float) -> str | None:
    """A one-line reason why `job` failed, or None if it succeeded."""
    future = job.future
    if future.cancelled():
        return "cancelled"
    exc = future.exception()
    if exc is None:
        return None
    if isinstance(exc, concurrent.futures.TimeoutError):
        return f"{job.kind} timed out after {timeout:g} s (worker killed)"
    if isinstance(exc, pebble.ProcessExpired):
        return f"{job.kind} worker died (exit code {exc.exitcode})"
    if isinstance(exc, EtcdComputeError):
        return str(exc)
    return f"{exc.__class__.__name__}: {str(exc).splitlines()[0] if str(exc) else ''}".rstrip(": ")


def _pool_broke(future: concurrent.futures.Future) -> bool:
    return (not future.cancelled()
            and isinstance(future.exception(), concurrent.futures.process.BrokenProcessPool))


def _is_uuid(text: str) -> bool:
    import uuid as uuidlib

    try:
        return str(uuidlib.UUID(text)) == text
    except ValueError:
        return False

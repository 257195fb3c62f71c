"""The worker pool, seen from the main process: jobs in, futures out.

A pebble process pool (forkserver: workers must not inherit the main
process's gRPC threads) runs driver calls from `worker.py`. A job that runs
past its timeout has its worker killed; a pool broken by dead workers is
replaced. `Job` is what the daemon remembers about a job while it runs.
"""

from __future__ import annotations

import concurrent.futures
import concurrent.futures.process
import logging
import multiprocessing
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import pebble

from etcd_compute.compute import worker
from etcd_compute.errors import EtcdComputeError, ServiceUnavailable

LOG = logging.getLogger("etcd_compute.compute")

BUILD, DESTROY, CLEANUP = "build", "destroy", "cleanup"
# Before a build: its claim checked (a thread of the main process) beside the image fetch.
CHECK = "check"
# An operator's actions run as jobs of the action's name.
STOP, START, SUSPEND, RESUME, REBOOT, REBUILD, RESIZE, SNAPSHOT, SECURITY_GROUPS = (
    "stop", "start", "suspend", "resume", "reboot", "rebuild", "resize", "snapshot",
    "security-groups")
PAUSE, UNPAUSE = "pause", "unpause"
ATTACH_INTERFACE, DETACH_INTERFACE = "attach-interface", "detach-interface"
ACTION_KINDS = (STOP, START, SUSPEND, RESUME, PAUSE, UNPAUSE, REBOOT, REBUILD, RESIZE,
                SNAPSHOT, SECURITY_GROUPS, ATTACH_INTERFACE, DETACH_INTERFACE)
# A move's steps (compute/moves.py).
MOVE_KINDS = worker.MOVE_KINDS
# The module the forkserver imports before it forks the workers.
PRELOAD = "etcd_compute.compute.preload"


@dataclass
class Job:
    """A driver call running in a worker process, for one instance."""

    kind: str  # CHECK (before BUILD) | BUILD | DESTROY | CLEANUP (remove what a failed
    # build left) | an action
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
    # A destroy for an evacuation (a drain): hand the instance over instead of DELETED.
    hand_over: bool = False
    # An action's request as the record keeps it (its `task`).
    task: dict[str, Any] | None = None
    started: float = field(default_factory=time.monotonic)


class WorkerPool:
    """Runs functions of `worker.py` in `config["compute"]["workers"]` processes."""

    def __init__(self, config: dict[str, Any]):
        self.config = config
        self._pool: pebble.ProcessPool | None = None
        # Stopped on purpose (shutdown, fencing): nothing may bring it back but start().
        self.stopped = False

    def start(self) -> WorkerPool:
        self._pool = self._new()
        self.stopped = False
        return self

    def _new(self) -> pebble.ProcessPool:
        context = multiprocessing.get_context("forkserver")
        # What every worker runs, loaded once in the forkserver (preload.py says why; by
        # name: importing it here would freeze this process).
        context.set_forkserver_preload(["__main__", PRELOAD])
        return pebble.ProcessPool(
            max_workers=self.config["compute"]["workers"],
            initializer=worker.init_worker,
            initargs=(self.config,),
            context=context,
        )

    def schedule(self, function: Callable[..., Any], *args: Any,
                 timeout: float) -> concurrent.futures.Future:
        """Run `function(*args)` in a worker; rebuild the pool if a dead worker broke it."""
        assert self._pool is not None, "pool not started"
        if self.stopped:
            raise ServiceUnavailable("the worker pool is stopped (fenced or shutting down)")
        try:
            return self._pool.schedule(function, args=args, timeout=timeout)
        except RuntimeError as exc:
            self.replace(str(exc))
            assert self._pool is not None
            return self._pool.schedule(function, args=args, timeout=timeout)

    def run(self, function: Callable[..., Any], *args: Any, timeout: float = 60) -> Any:
        """`function(*args)` in a worker, waited for."""
        return self.schedule(function, *args, timeout=timeout).result()

    def healthy(self) -> bool:
        assert self._pool is not None
        try:
            self._pool._check_pool_status()  # pebble has no public health check
        except RuntimeError:
            return False
        return True

    def replace(self, why: str) -> None:
        LOG.error("worker pool broken (%s); starting a new one", why)
        broken, self._pool = self._pool, self._new()
        if broken is not None:
            # Its remaining futures fail or cancel, which ends their jobs like any failure.
            threading.Thread(target=broken.stop, name="stop-broken-pool", daemon=True).start()

    def stop(self, join_timeout: float = 5) -> None:
        self.stopped = True
        if self._pool is None:
            return
        self._pool.stop()
        try:
            self._pool.join(timeout=join_timeout)
        except Exception:  # noqa: BLE001 (best effort at shutdown)
            LOG.debug("worker pool did not join in %s s", join_timeout)


def job_error(job: Job, timeout: float) -> str | None:
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


def pool_broke(future: concurrent.futures.Future) -> bool:
    """The job failed because the pool lost its workers, not because of the instance."""
    return (not future.cancelled()
            and isinstance(future.exception(), concurrent.futures.process.BrokenProcessPool))

"""The compute daemon's Prometheus metrics (docs/reference/metrics.md lists them).

Kept out of the daemon's own modules: `service.py`, `machine.py` and
`heartbeat.py` call the hooks below, one line each, and `start` (from
`ComputeService.run`) serves them when `compute.metrics_listen` is set. The
hooks count whether or not anything is served; they are cheap.

Every label is a small fixed set: job kinds (check, build, destroy, cleanup and
the operators' actions), results, failure reasons, instance states, resource
classes. Never an instance uuid.

- Jobs in flight are read from the machine's jobs at each scrape.
- A job is counted once when it ends (`job_finished`), even when the main
  loop handles its end again after etcd or Placement failed half way. A job
  the pool lost its workers under is run again by the machine: its failure
  is counted (worker_died), its build only once, by the run that ends it.
- Watch lag is from the watch thread receiving an etcd event under our
  prefix to the main loop handling it (this daemon's backlog, on one
  monotonic clock). Request lag is from a new build spec's `requested_at`
  (the scheduler's wall clock) to the same moment: scheduling, etcd's
  delivery and the backlog, plus any clock skew between the two machines.
- Instances by state are counted from this host's records in etcd, soon
  after a job ends or a spec arrives (at most once per `RECOUNT_SECONDS`
  per 50 hosts), and every `INSTANCES_REFRESH_SECONDS` for what others
  change (the scheduler, the controller). Capacity is the inventory this
  daemon registered and Placement's usages, every
  `compute.inventory_refresh_seconds`. Both in a thread of their own, so a
  scrape never waits on etcd or Placement.
"""

from __future__ import annotations

import concurrent.futures
import concurrent.futures.process
import logging
import socket
import threading
import time
from collections import Counter as Tally
from collections.abc import Callable, Iterable
from typing import Any

import pebble
from prometheus_client import Counter, Gauge, Histogram

from etcd_compute import messages
from etcd_compute import metrics as common
from etcd_compute.compute.pool import (
    ACTION_KINDS,
    BUILD,
    CHECK,
    CLEANUP,
    DESTROY,
    MOVE_KINDS,
    Job,
    pool_broke,
)
from etcd_compute.errors import ConfigError, EtcdComputeError, InvalidMessage, RequestError
from etcd_compute.etcd import KeyValueStore
from etcd_compute.instances import states
from etcd_compute.placement import PlacementClient

LOG = logging.getLogger("etcd_compute.compute")

# Re-exported: the daemon's loops count their retries through this module.
retried = common.retried

KINDS = (BUILD, DESTROY, CLEANUP, CHECK, *ACTION_KINDS, *MOVE_KINDS)
RESULTS = ("success", "failure", "cancelled")
# An operator's action also ends refused: not allowed in its state, or not claimed.
ACTION_RESULTS = (*RESULTS, "refused")
REASONS = ("request", "timeout", "worker_died", "driver", "internal")

RECOUNT_SECONDS = 1.0
INSTANCES_REFRESH_SECONDS = 30.0

# A real build downloads and converts an image and boots a guest: seconds to minutes.
BUILD_BUCKETS = (0.1, 0.25, 0.5, 1, 2.5, 5, 10, 20, 30, 60, 120, 300, 600, 900)
DESTROY_BUCKETS = (0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120)
# A stop waits for the guest (then forces it); a rebuild may download an image.
ACTION_BUCKETS = (0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 900)
LAG_BUCKETS = (0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30)

JOBS_IN_FLIGHT = Gauge(
    "etcd_compute_jobs_in_flight",
    "Driver jobs running in the worker pool, by kind (check: a build's claim checked while its "
    "image is fetched; cleanup: removing what a failed build left).", ["kind"])
BUILDS = Counter(
    "etcd_compute_builds",
    "Build jobs ended on this host, by result: success (the driver built it), failure, "
    "cancelled (destroyed while building).", ["result"])
FAILURES = Counter(
    "etcd_compute_job_failures",
    "Failed jobs by kind and reason: request (the request's image, URL or size), timeout "
    "(killed after compute.job_timeout_seconds), worker_died, driver (any other driver "
    "error), internal (recording the outcome failed; the instance was ended in ERROR).",
    ["kind", "reason"])
BUILD_SECONDS = Histogram(
    "etcd_compute_build_duration_seconds",
    "How long build jobs ran in the worker pool, by result (success, failure).",
    ["result"], buckets=BUILD_BUCKETS)
DESTROY_SECONDS = Histogram(
    "etcd_compute_destroy_duration_seconds",
    "How long destroy jobs ran in the worker pool, by result (success, failure).",
    ["result"], buckets=DESTROY_BUCKETS)
ACTIONS_DONE = Counter(
    "etcd_compute_actions",
    "Operators' actions ended on this host, by action (stop, start, suspend, resume, pause, "
    "unpause, reboot, rebuild, resize, snapshot) and result: success, failure (the instance "
    "is as it was), cancelled (destroyed meanwhile), refused (not allowed in its state, or its "
    "claim not held).",
    ["action", "result"])
ACTION_SECONDS = Histogram(
    "etcd_compute_action_duration_seconds",
    "How long the operators' actions ran in the worker pool, by action and result (success, "
    "failure).", ["action", "result"], buckets=ACTION_BUCKETS)
POWER_CHANGES = Counter(
    "etcd_compute_power_changes",
    "Guests seen by the hypervisor to stop or start without an action of ours, by the state "
    "their record took (SHUTOFF: shut down, crashed or powered off outside; ACTIVE: started "
    "outside).", ["state"])
WATCH_LAG = Histogram(
    "etcd_compute_watch_lag_seconds",
    "From the watch receiving an etcd event under this host's prefix to the main loop "
    "handling it.", buckets=LAG_BUCKETS)
REQUEST_LAG = Histogram(
    "etcd_compute_request_lag_seconds",
    "From a new build spec's requested_at (the scheduler's clock) to this host handling it.",
    buckets=LAG_BUCKETS)
INSTANCES = Gauge(
    "etcd_compute_instances",
    "Instance records on this host, by state.", ["state"])
CAPACITY = Gauge(
    "etcd_compute_capacity",
    "Capacity this host registered in Placement, (total - reserved) x allocation_ratio, by "
    "resource class.", ["resource_class"])
CAPACITY_FREE = Gauge(
    "etcd_compute_capacity_free",
    "Capacity registered minus Placement's usage, by resource class.", ["resource_class"])

# Every series of a fixed label set exists from the start (at 0): a rate or an increase
# over it is never empty.
for _result in RESULTS:
    BUILDS.labels(_result)
for _kind in KINDS:
    JOBS_IN_FLIGHT.labels(_kind)
    for _reason in REASONS:
        FAILURES.labels(_kind, _reason)
for _result in ("success", "failure"):
    BUILD_SECONDS.labels(_result)
    DESTROY_SECONDS.labels(_result)
for _action in ACTION_KINDS:
    for _result in ACTION_RESULTS:
        ACTIONS_DONE.labels(_action, _result)
    for _result in ("success", "failure"):
        ACTION_SECONDS.labels(_action, _result)
for _state in ("SHUTOFF", "ACTIVE"):
    POWER_CHANGES.labels(_state)
for _state in states.STATES:
    INSTANCES.labels(_state)

# Set when records may have changed here: the refresher counts them again soon.
_recount = threading.Event()
# Set once metrics are served: hooks that cost more than a counter run only then.
_serving = threading.Event()


# --- jobs -----------------------------------------------------------------------------------


def outcome(job: Job) -> tuple[str, str | None, bool]:
    """(result, failure reason or None, run again) of a finished job."""
    future = job.future
    if future.cancelled():
        return "cancelled", None, False
    exc = future.exception()
    if exc is None:
        return "success", None, False
    if isinstance(exc, concurrent.futures.TimeoutError):
        reason = "timeout"
    elif isinstance(exc, pebble.ProcessExpired | concurrent.futures.process.BrokenProcessPool):
        reason = "worker_died"
    elif isinstance(exc, RequestError):
        reason = "request"
    else:
        reason = "driver"
    # As the machine decides (`_finish_job`): the pool broke under a first attempt.
    again = pool_broke(future) and job.attempt == 1
    return "failure", reason, again


def job_finished(job: Job) -> None:
    """A job's future is done (machine.on_job_done): count it, once."""
    if job.__dict__.get("_metered"):
        return  # its end is handled again (etcd or Placement failed half way)
    job.__dict__["_metered"] = True
    elapsed = time.monotonic() - job.started
    result, reason, again = outcome(job)
    if reason is not None:
        FAILURES.labels(job.kind, reason).inc()
    _recount.set()
    if again:
        return  # the machine runs it again; that run counts
    if job.kind == BUILD:
        BUILDS.labels(result).inc()
        if result != "cancelled":
            BUILD_SECONDS.labels(result).observe(elapsed)
    elif job.kind == DESTROY and result != "cancelled":
        DESTROY_SECONDS.labels(result).observe(elapsed)
    elif job.kind in ACTION_KINDS:
        ACTIONS_DONE.labels(job.kind, result).inc()
        if result != "cancelled":
            ACTION_SECONDS.labels(job.kind, result).observe(elapsed)


def counted_already(job: Job) -> None:
    """`job` goes on from one counted (a build's wait for its ports, plugging.py): its end
    is not counted again."""
    job.__dict__["_metered"] = True


def action_refused(action: str) -> None:
    """An operator's action was refused here (compute/actions.py)."""
    if action in ACTION_KINDS:
        ACTIONS_DONE.labels(action, "refused").inc()


def power_changed(state: str) -> None:
    """A guest's record followed what the hypervisor saw (compute/power.py)."""
    POWER_CHANGES.labels(state).inc()


def job_failed_internally(job: Job) -> None:
    """Recording a job's outcome raised (machine._abandon)."""
    FAILURES.labels(job.kind, "internal").inc()


def jobs_of_kind(jobs: dict[str, Job], kind: str) -> int:
    # A copy first: the main thread adds and removes jobs while a scrape reads them.
    return sum(1 for job in list(jobs.values()) if job.kind == kind)


# --- the watch ------------------------------------------------------------------------------


def event_arrived(event: Any) -> None:
    """The watch thread received `event` (before queuing it for the main loop)."""
    event.__dict__["_arrived"] = time.monotonic()


def event_handled(event: Any) -> None:
    """The main loop is handling `event` (service.on_watch_event)."""
    arrived = event.__dict__.pop("_arrived", None)
    if arrived is None:
        return  # handled again after a retry: observed already
    now = time.monotonic()
    WATCH_LAG.observe(now - arrived)
    _recount.set()
    if _serving.is_set():
        lag = request_lag(event, time.time())
        if lag is not None:
            REQUEST_LAG.observe(lag)


def request_lag(event: Any, now: float) -> float | None:
    """Seconds since a new build spec was requested (None for anything else): the key was
    created by this event (version 1), its action is build and it has a requested_at."""
    if getattr(event, "version", 0) != 1:
        return None
    try:
        spec = messages.parse(event.value, "instance_spec")
    except (InvalidMessage, TypeError):
        return None
    if not isinstance(spec, dict) or spec.get("action") != "build":
        return None
    requested = spec.get("requested_at")
    if isinstance(requested, bool) or not isinstance(requested, int | float):
        return None
    return max(0.0, now - requested)


# --- instances and capacity -------------------------------------------------------------


def count_states(store: KeyValueStore, hosts: list[str]) -> Tally[str]:
    """Instance records on `hosts` by state (unreadable records are skipped)."""
    counts: Tally[str] = Tally()
    for host in hosts:
        for record in store.read_prefix(messages.INSTANCE_RECORD,
                                        store.keys.records(host)).values():
            counts[record["state"]] += 1
    return counts


def capacity(inventories: dict[str, dict[str, Any]],
             usages: dict[str, dict[str, int]]) -> dict[str, tuple[int, int]]:
    """{resource class: (capacity, free)} summed over the hosts of `inventories`, capacity as
    Placement computes it, (total - reserved) x allocation_ratio."""
    found: dict[str, tuple[int, int]] = {}
    for host, inventory in inventories.items():
        for rc, inv in inventory.items():
            room = int((inv["total"] - inv.get("reserved", 0)) * inv.get("allocation_ratio", 1.0))
            used = usages.get(host, {}).get(rc, 0)
            total, free = found.get(rc, (0, 0))
            found[rc] = (total + room, free + room - used)
    return found


class Refresher:
    """Counts instances by state and reads capacity, in a thread of its own: the records of
    `hosts` in `store`, what `inventories()` registered (by host) and its usage in Placement
    every `capacity_every` seconds, until `stopping` is set."""

    def __init__(self, store: KeyValueStore, hosts: Iterable[str],
                 inventories: Callable[[], dict[str, dict[str, Any]]],
                 placement: PlacementClient, capacity_every: float,
                 stopping: threading.Event):
        self.store = store
        self.hosts = sorted(hosts)
        self.inventories = inventories
        self.placement = placement
        self.capacity_every = capacity_every
        self.recount_every = max(RECOUNT_SECONDS, len(self.hosts) / 50)
        self.stopping = stopping
        self.classes: set[str] = set()
        self.last_count = self.last_read = float("-inf")

    def start(self) -> None:
        threading.Thread(target=self.loop, name="metrics", daemon=True).start()

    def loop(self) -> None:
        while not self.stopping.is_set():
            self.tick(time.monotonic())
            self.stopping.wait(RECOUNT_SECONDS)

    def tick(self, now: float) -> None:
        """Count and read what is due at `now`."""
        since = now - self.last_count
        if since >= INSTANCES_REFRESH_SECONDS or (_recount.is_set() and
                                                  since >= self.recount_every):
            _recount.clear()
            self.last_count = now
            self.guarded(self.count_instances)
        if now - self.last_read >= self.capacity_every and self.inventories():
            self.last_read = now
            self.guarded(self.read_capacity)

    def guarded(self, step: Any) -> None:
        try:
            step()
        except EtcdComputeError as exc:  # counted as a backend error where it was raised
            LOG.debug("metrics: %s failed: %s", step.__name__, exc)
        except Exception:  # noqa: BLE001 (metrics must never stop the daemon)
            LOG.exception("metrics: %s failed", step.__name__)

    def count_instances(self) -> None:
        counts = count_states(self.store, self.hosts)
        for state in states.STATES:
            INSTANCES.labels(state).set(counts.get(state, 0))

    def read_capacity(self) -> None:
        inventories = dict(self.inventories())
        usages = {host: self.placement.get_usages(host) for host in inventories}
        found = capacity(inventories, usages)
        for rc, (room, free) in found.items():
            CAPACITY.labels(rc).set(room)
            CAPACITY_FREE.labels(rc).set(free)
        for gone in self.classes - set(found):
            CAPACITY.remove(gone)
            CAPACITY_FREE.remove(gone)
        self.classes = set(found)


# --- serving ------------------------------------------------------------------------------


def bridge_addresses(bridge: str | None) -> set[str]:
    """The IP addresses this host has on `bridge` (the libvirt driver's host bridge)."""
    if not bridge:
        return set()
    import psutil  # here: only the libvirt driver has a bridge (a fake host never needs it)

    found = set()
    for address in psutil.net_if_addrs().get(bridge, []):
        if address.family in (socket.AF_INET, socket.AF_INET6):
            found.add(address.address.split("%", 1)[0])
    return found


def checked_listen(config: dict[str, Any]) -> common.Listen | None:
    """compute.metrics_listen as checked on load, and not on the guests' host bridge."""
    listen = common.listen_of(config, "compute")
    driver = config["driver"]
    if listen is not None and driver["name"] == "libvirt" and listen.host in bridge_addresses(
            driver["libvirt"]["bridge"]):
        raise ConfigError(f"compute.metrics_listen {listen}: an address of "
                          f"driver.libvirt.bridge {driver['libvirt']['bridge']}, which the "
                          "guests' second network cards are on")
    return listen


def start(config: dict[str, Any], jobs: dict[str, Job],
          refresher: Callable[[], Refresher]) -> Any:
    """Serve metrics when compute.metrics_listen is set in `config` (the server, else None):
    jobs in flight read from `jobs` (the machine's, by uuid) at each scrape, the rest kept
    by the refresher made then."""
    listen = checked_listen(config)
    if listen is None:
        return None
    for kind in KINDS:
        JOBS_IN_FLIGHT.labels(kind).set_function(lambda kind=kind: jobs_of_kind(jobs, kind))
    server = common.serve(listen, "compute.metrics_listen")
    _serving.set()
    refresher().start()
    return server

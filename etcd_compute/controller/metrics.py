"""The controller's Prometheus metrics (`schedule.py serve`; docs/reference/metrics.md lists them).

`serve.py`, `decisions.py` and `queue_service.py` call the hooks below, one line each;
`start` (from `ControllerService.run`) serves them when `scheduler.metrics_listen`
is set. Labels are small fixed sets, never an instance uuid. etcd and
Placement errors and retries are the shared counters of `etcd_compute.metrics`.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from prometheus_client import Counter, Gauge, Histogram

from etcd_compute import metrics as common

# Re-exported: the controller's loops count their retries through this module.
retried = common.retried

# What the leader does with a record event, by the handler's name.
EVENT_KINDS = {"on_record": "record", "on_record_gone": "record_gone"}
# Each action's results. reschedule: moved (to an alternate), failed (none would take it:
# ERROR, claim freed), conflict (the instance changed meanwhile; the next event decides).
# recover (an instance of a dead host): what Controller.recover_instance returned.
ACTIONS = {"reschedule": ("moved", "failed", "conflict"),
           "recover": ("rebuilt", "error", "deleted", "left", "retry")}

# Fencing a dead host before recovering its instances: each attempt, by path (libvirt:
# through its libvirtd; command: the configured fence agent) and outcome; and each host
# recovered, by what allowed it (libvirt or command: fenced; grace: TTL + grace waited).
FENCE_PATHS, FENCE_OUTCOMES = ("libvirt", "command"), ("fenced", "refused", "timeout")
RECOVERY_PATHS = ("libvirt", "command", "grace")

LEADER = Gauge(
    "etcd_compute_controller_leader",
    "1 while this controller is the elected leader (the one that acts), else 0.")
EVENTS = Counter(
    "etcd_compute_controller_events",
    "Record events the leader handled, by kind (record: written; record_gone: removed or "
    "expired) and result (ok; error: an unexpected exception, logged).", ["kind", "result"])
ACTIONS_DONE = Counter(
    "etcd_compute_controller_actions",
    "What the controller did about instances, by action and result (reschedule: moved, "
    "failed, conflict; recover: rebuilt, error, deleted, left, retry).", ["action", "result"])

FENCES = Counter(
    "etcd_compute_controller_fences",
    "Attempts to fence a dead host before recovering its instances, by path (libvirt: "
    "through its libvirtd over TLS; command: the configured fence agent) and outcome "
    "(fenced, refused, timeout).", ["path", "outcome"])
HOSTS_RECOVERED = Counter(
    "etcd_compute_controller_hosts_recovered",
    "Dead hosts whose instances were recovered, by what allowed it (libvirt or command: "
    "fenced first, at once; grace: after TTL + grace, unfenced).", ["path"])

# The scheduler service: requests by what became of them in a pass, and pass sizes.
QUEUE_RESULTS = ("answered", "refused", "retried")
QUEUE_REQUESTS = Counter(
    "etcd_compute_scheduler_requests",
    "Requests the scheduler service handled, by result (answered: instances placed; "
    "refused: answered with an error; retried: left in the queue for the next pass).",
    ["result"])
QUEUE_PASS_SIZE = Histogram(
    "etcd_compute_scheduler_pass_requests",
    "Requests pending at each pass of the scheduler service (the batch size).",
    buckets=(1, 2, 4, 8, 16, 32, 64, 128, 256, 1024))

for _result in QUEUE_RESULTS:
    QUEUE_REQUESTS.labels(_result)
for _kind in (*EVENT_KINDS.values(), "other"):
    for _result in ("ok", "error"):
        EVENTS.labels(_kind, _result)
for _path in FENCE_PATHS:
    for _outcome in FENCE_OUTCOMES:
        FENCES.labels(_path, _outcome)
for _path in RECOVERY_PATHS:
    HOSTS_RECOVERED.labels(_path)
for _action, _results in ACTIONS.items():
    for _result in _results:
        ACTIONS_DONE.labels(_action, _result)


def event_handled(handler: Callable[..., Any], result: str = "ok") -> None:
    """The leader handled an event with `handler` (ok), or it raised (error)."""
    kind = EVENT_KINDS.get(getattr(handler, "__name__", ""), "other")
    EVENTS.labels(kind, result).inc()


def recovered(result: str) -> None:
    """An instance of a dead host was `result` (one of ACTIONS["recover"])."""
    assert result in ACTIONS["recover"], result
    ACTIONS_DONE.labels("recover", result).inc()


def fence_tried(path: str, outcome: str) -> None:
    """An attempt to fence a dead host by `path` ended `outcome`."""
    assert path in FENCE_PATHS and outcome in FENCE_OUTCOMES, (path, outcome)
    FENCES.labels(path, outcome).inc()


def host_recovered(path: str) -> None:
    """A dead host's instances were recovered, allowed by `path` (RECOVERY_PATHS)."""
    assert path in RECOVERY_PATHS, path
    HOSTS_RECOVERED.labels(path).inc()


def rescheduled(result: str) -> None:
    """A RESCHEDULING instance was `result` (one of ACTIONS["reschedule"])."""
    assert result in ACTIONS["reschedule"], result
    ACTIONS_DONE.labels("reschedule", result).inc()


def queue_pass(requests: int, done: Any) -> None:
    """A pass of the scheduler service over `requests` pending; `done` counts by result."""
    QUEUE_PASS_SIZE.observe(requests)
    for result in QUEUE_RESULTS:
        if done[result]:
            QUEUE_REQUESTS.labels(result).inc(done[result])


def start(config: dict[str, Any], is_leader: Callable[[], bool]) -> Any:
    """Serve metrics when scheduler.metrics_listen is set in `config` (the server, else None);
    the leader gauge asks `is_leader` at each scrape."""
    listen = common.listen_of(config, "scheduler")
    if listen is None:
        return None
    LEADER.set_function(lambda: 1.0 if is_leader() else 0.0)
    return common.serve(listen, "scheduler.metrics_listen")

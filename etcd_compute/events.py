"""An instance's events: what happened to it, who asked, where, when, how it ended.

Like Nova's instance actions: one entry per action (create, stop, resize,
destroy, a power change seen by the hypervisor ...), started "running" and
ended "success", "error" or "refused". The last MAX_EVENTS entries live in
one key under the instance's host, `/hosts/<rp>/events/<uuid>` (a host may
write only its own prefix), and are written in the same transaction as the
state change they describe (`instances/`), compared through the record's
revision: every write of the events also writes the record. They move with
the instance to another host, expire with its DELETED record and go with it.

The functions here are pure (a list in, a new list out) but `read` and `put`.
"""

from __future__ import annotations

import time
from typing import Any

from etcd_compute import messages
from etcd_compute.errors import InvalidMessage
from etcd_compute.etcd import KeyValueStore, Put, put_message
from etcd_compute.keys import Keys

MAX_EVENTS = 50
MAX_TEXT = 1024
RUNNING, SUCCESS, ERROR, REFUSED = "running", "success", "error", "refused"
# Who did what when no operator asked.
CONTROLLER, HYPERVISOR = "controller", "hypervisor"

Events = list[dict[str, Any]]


def _text(text: str | None) -> str | None:
    """One line, bounded (an error may come from anywhere)."""
    if text is None:
        return None
    line = " ".join(str(text).split())
    return line if len(line) <= MAX_TEXT else line[:MAX_TEXT - 3] + "..."


def _printable(text: str | None) -> str | None:
    line = _text(text)
    return None if line is None else "".join(ch if ch.isprintable() else "?" for ch in line)


def event(action: str, host: str | None, host_name: str | None = None, *,
          by: str | None = None, request_id: str | None = None, result: str = RUNNING,
          error: str | None = None, detail: str | None = None,
          started_at: float | None = None) -> dict[str, Any]:
    """A new entry; ended now unless it is running."""
    now = time.time()
    return {"action": action, "request_id": request_id, "by": _printable(by)[:255] if by else None,
            "host": host, "host_name": host_name,
            "started_at": min(started_at, now) if started_at else now,
            "ended_at": None if result == RUNNING else now, "result": result,
            "error": _text(error), "detail": _printable(detail)}


def append(events: Events, entry: dict[str, Any]) -> Events:
    """`events` with `entry` last, the oldest dropped beyond MAX_EVENTS."""
    return [*events, entry][-MAX_EVENTS:]


def running(events: Events) -> dict[str, Any] | None:
    """The entry still running (the last one), if any."""
    return next((e for e in reversed(events) if e["result"] == RUNNING), None)


def _ended(entry: dict[str, Any], result: str, error: str | None,
           detail: str | None) -> dict[str, Any]:
    return {**entry, "ended_at": time.time(), "result": result, "error": _text(error),
            "detail": _printable(detail) if detail is not None else entry.get("detail")}


def close(events: Events, error: str) -> Events:
    """`events` with every running entry ended in error (its action was cut short)."""
    return [_ended(e, ERROR, error, None) if e["result"] == RUNNING else e for e in events]


def end(events: Events, actions: str | tuple[str, ...], result: str, error: str | None = None,
        detail: str | None = None, otherwise: dict[str, Any] | None = None) -> Events:
    """`events` with the running entry of one of `actions` ended as `result` (any other
    running entry is closed: superseded); with none running, `otherwise` (an entry ended
    the same way) appended instead, if given."""
    wanted = (actions,) if isinstance(actions, str) else actions
    current = running(events)
    if current is not None and current["action"] not in wanted:
        events = close(events, f"superseded by {wanted[0]}")
        current = None
    if current is None:
        if otherwise is None:
            return list(events)
        return append(events, _ended(otherwise, result, error, detail))
    return [_ended(e, result, error, detail) if e is current else e for e in events]


def read(store: KeyValueStore, host: str, uuid: str) -> Events:
    """The events of `uuid` on `host`; none when absent or unreadable (the next write
    replaces an unreadable value)."""
    entry = store.get(store.keys.events(host, uuid))
    if entry is None:
        return []
    try:
        return messages.decode(messages.INSTANCE_EVENTS, entry.value)["events"]
    except InvalidMessage:
        return []


def put(keys: Keys, host: str, uuid: str, events: Events, lease: int | None = None) -> Put:
    """The write of `events` under `host` (in the caller's transaction)."""
    return put_message(messages.INSTANCE_EVENTS, keys.events(host, uuid),
                       {"uuid": uuid, "events": events[-MAX_EVENTS:]}, lease)

"""The operator's actions on an instance: asked, taken up, ended, or refused.

The operator writes an action into the host's spec with a request id
(`request_action`, `request_destroy`, `request_evacuate`, a request from
`new_request`); the host takes it up (`begin_action`: the record keeps the
request as its `task` while it runs), and ends it in one transaction
(`end_action`), which on success also writes the action's changes (size,
image, a rebuild's user data and key, security groups) into the spec; a resize that
holds its old size leaves the hold on the record (`resize_hold`) until it is confirmed or
reverted. A failed action ends where it started. A host that
will not act on a request notes it as taken and says why (`refuse_action`).
"""

from __future__ import annotations

import time
import uuid as uuidlib
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Any

from etcd_compute import events, messages
from etcd_compute.etcd import Compare, Entry, KeyValueStore, Op, Put, Txn, put_message, unchanged
from etcd_compute.instances.ownership import record_put, spec_put
from etcd_compute.instances.records import RecordRead, moved
from etcd_compute.instances.states import ACTIONS, DESTROY, ENDS, MIGRATE, check_action


def event_action(action: str, request: dict[str, Any] | None) -> str:
    """The name an action's event goes by: a resize that reverts a held one is a
    revert-resize (Nova's revertResize)."""
    return "revert-resize" if action == "resize" and (request or {}).get("reverts") else action


# The id of the compute API request being served (its X-Compute-Request-ID without "req-"),
# as Nova's context.request_id: what it asks carries it, so its instance actions are found
# by the id its answer gave. Unset elsewhere (the CLI, the controller): a fresh id each.
_SERVING: ContextVar[str | None] = ContextVar("serving_request_id", default=None)


@contextmanager
def serving(request_id: str) -> Iterator[None]:
    """While the compute API serves the request `request_id` (`req-<uuid>`)."""
    token = _SERVING.set(request_id.removeprefix("req-"))
    try:
        yield
    finally:
        _SERVING.reset(token)


def request_id() -> str:
    """The id a request is written with: the compute API request's being served, else a
    fresh one."""
    return _SERVING.get() or str(uuidlib.uuid4())


def new_request(by: str | None, **params: Any) -> dict[str, Any]:
    """An operator's request (a spec's `request`): its id (`request_id`), who, when, its
    parameters."""
    return {"id": request_id(), "by": by, "at": time.time(), **params}


def _rewrite_spec(store: KeyValueStore, entry: Entry, spec: dict[str, Any],
                  compare: tuple[Compare, ...] = ()) -> int | None:
    return store.commit(Txn([Compare(entry.key, "mod", "==", entry.mod_revision), *compare],
                            [put_message(messages.INSTANCE_SPEC, entry.key, spec)]))


def request_destroy(store: KeyValueStore, entry: Entry, spec: dict[str, Any],
                    by: str | None = None) -> int | None:
    """The operator's destroy: the host's spec rewritten with action destroy."""
    return _rewrite_spec(store, entry, {**spec, "action": DESTROY, "request": new_request(by)})


def request_evacuate(store: KeyValueStore, entry: Entry, spec: dict[str, Any],
                     by: str | None = None) -> int | None:
    """A drain's request: the host's spec rewritten with action evacuate (give it up)."""
    return _rewrite_spec(store, entry, {**spec, "action": "evacuate",
                                        "request": new_request(by)})


def request_action(store: KeyValueStore, entry: Entry, spec: dict[str, Any], read: RecordRead,
                   action: str, request: dict[str, Any],
                   also: tuple[list[Compare], list[Op]] = ([], [])) -> int | None:
    """The operator's stop, start, reboot, rebuild or resize: the host's spec rewritten with
    it, if neither spec nor record moved since they were read (and `also`'s compares hold:
    its writes go in the same transaction, the compute API's view of the request).
    ActionRefused (nothing written) when the record's state does not allow it."""
    check_action(read.state, action, spec["uuid"])
    record_key = store.keys.record(spec["host"], spec["uuid"])
    compares, writes = also
    return store.commit(Txn(
        [Compare(entry.key, "mod", "==", entry.mod_revision),
         unchanged(record_key, read.revision), *compares],
        [put_message(messages.INSTANCE_SPEC, entry.key,
                     {**spec, "action": action, "request": request}), *writes]))


def confirm_resize(store: KeyValueStore, read: RecordRead, by: str | None,
                   also: tuple[list[Compare], list[Op]] = ([], [])) -> int | None:
    """A held resize confirmed (its hold freed in Placement first): the record forgets the
    hold and a confirm-resize event says who, if the record did not move since it was
    read."""
    assert read.record is not None
    keys, record = store.keys, read.record
    host, uuid = record["host"], record["uuid"]
    log = events.append(events.read(store, host, uuid), events.event(
        "confirm-resize", host, record.get("host_name"), by=by, result=events.SUCCESS,
        request_id=request_id()))
    compares, writes = also
    return store.commit(Txn(
        [unchanged(keys.record(host, uuid), read.revision), *compares],
        [record_put(keys, {**record, "resize_hold": None, "updated_at": time.time()}),
         events.put(keys, host, uuid, log), *writes]))


def begin_action(store: KeyValueStore, spec: dict[str, Any], spec_revision: int,
                 read: RecordRead) -> int | None:
    """ACTIVE or SHUTOFF -> the action's state, the request kept as the record's task, an
    event started; if neither record nor spec moved since they were read."""
    assert read.record is not None and read.state is not None
    keys, host, uuid = store.keys, spec["host"], spec["uuid"]
    action, request = spec["action"], spec["request"]
    task = {**request, "action": action, "from": read.state}
    record = moved(read.record, ACTIONS[action][0], task=task, request_id=request["id"],
                   error=None)
    entry = events.event(event_action(action, request), host, record.get("host_name"),
                         by=request.get("by"), request_id=request["id"],
                         started_at=request["at"])
    if action == MIGRATE:  # live or cold: Nova names them apart (live-migration, migrate)
        entry["live"] = bool(request.get("live"))
    log = events.append(events.read(store, host, uuid), entry)
    return store.commit(Txn(
        [unchanged(keys.record(host, uuid), read.revision),
         Compare(keys.spec(host, uuid), "mod", "==", spec_revision)],
        [record_put(keys, record), events.put(keys, host, uuid, log)]))


def end_action(store: KeyValueStore, read: RecordRead, spec_entry: Entry | None,
               error: str | None = None, ip: str | None = None,
               detail: str | None = None) -> int | None:
    """The action's state -> where it ends (`ENDS`, or where it started), in one transaction
    compared with the record and spec as read. Success writes the action's changes (size,
    image) into the record and the spec; an error leaves both as they were. `detail`: what
    the action made, for its event (a snapshot's image)."""
    assert read.record is not None
    keys, record = store.keys, read.record
    host, uuid, task = record["host"], record["uuid"], record["task"]
    action = task["action"]
    fields: dict[str, Any] = {"error": None}
    if error is None:
        state = ENDS.get(action, task["from"])
        if "resources" in task:
            fields["resources"] = task["resources"]
        if "image" in task:
            fields["image"] = task["image"]["url"]
        if "hold" in task:  # a held resize done: VERIFY_RESIZE until confirmed or reverted
            fields["resize_hold"] = {**task["hold"], "request_id": task["id"]}
        if "reverts" in task:
            fields["resize_hold"] = None
        if "security_groups" in task:
            fields["security_groups"] = task["security_groups"]
    else:
        state = task["from"]
    if ip:
        fields["ip"] = ip
    named = event_action(action, task)
    log = events.end(events.read(store, host, uuid), named,
                     events.SUCCESS if error is None else events.ERROR, error, detail=detail,
                     otherwise=events.event(named, host, record.get("host_name"),
                                            request_id=task["id"]))
    compare = [unchanged(keys.record(host, uuid), read.revision)]
    success = [record_put(keys, moved(record, state, **fields)),
               events.put(keys, host, uuid, log)]
    changes = {k: task[k] for k in ("resources", "allocations", "image", "query", "user_data",
                                    "ssh_key", "security_groups") if k in task}
    if error is None and changes and spec_entry is not None:
        spec = messages.decode(messages.INSTANCE_SPEC, spec_entry.value)
        compare.append(Compare(spec_entry.key, "mod", "==", spec_entry.mod_revision))
        success.append(spec_put(keys, {**spec, **changes}))
    if ip:
        success.append(Put(keys.booted(host, uuid), ip))
    return store.commit(Txn(compare, success))


def refuse_action(store: KeyValueStore, spec: dict[str, Any], spec_revision: int,
                  read: RecordRead, reason: str) -> int | None:
    """The host will not act on the spec's request (not allowed in this state, or not
    what Placement holds): the record notes the request as taken (so it is not acted on
    again) and its events say why; nothing else changes."""
    assert read.record is not None
    keys, host, uuid = store.keys, spec["host"], spec["uuid"]
    request = spec.get("request") or {}
    record = {**read.record, "request_id": request.get("id"), "updated_at": time.time()}
    log = events.append(events.read(store, host, uuid), events.event(
        event_action(spec["action"], request), host, record.get("host_name"),
        by=request.get("by"), request_id=request.get("id"), result=events.REFUSED,
        error=reason))
    return store.commit(Txn(
        [unchanged(keys.record(host, uuid), read.revision),
         Compare(keys.spec(host, uuid), "mod", "==", spec_revision)],
        [record_put(keys, record), events.put(keys, host, uuid, log)]))

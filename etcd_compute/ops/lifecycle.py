"""The operator's lifecycle actions on the instance's host: stop, start, suspend, resume,
pause, unpause, reboot, rebuild, resize, snapshot, security-groups (the compute API's
add/removeSecurityGroup).

    schedule.py stop UUID | start UUID | reboot [--hard] UUID | rebuild [--image URL] UUID
    schedule.py suspend UUID | resume UUID
    schedule.py pause UUID | unpause UUID
    schedule.py resize QUERY UUID
    schedule.py events UUID

Each action reads the instance (its host, record and spec) and is refused
before anything is written when the record's state does not allow it
(`instances.states.check_action` names the state and what it allows) or its host is
down. Then it writes the action, with a request id, into the host's spec, in
one transaction compared with the spec and record it read
(`instances.actions.request_action`); the host does the rest (`compute/actions.py`).

An action is also refused while another request (a destroy, a drain's
evacuate, an action its host has not taken up yet) is pending in the spec:
it would overwrite it.

A resize first replaces the claim in Placement, on the same host, in one
request checked against the consumer generation (`claims.resize`): a size
that does not fit there is refused with nothing changed. If the etcd write
then fails (the instance changed meanwhile, or etcd raised), the claim is put
back (`claims.written_or_undone`), unless someone replaced it since
(`claims.undo`): of two racing resizes, the one whose spec write wins holds the
claim. Its query may hold resources only
(the instance stays where it is); the new size is written into the spec's
query with the first one's traits and aggregates, for a rebuild elsewhere
after a host failure.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable, Collection
from dataclasses import dataclass
from functools import partial
from typing import Any

from etcd_compute import claims, events
from etcd_compute.errors import (
    ConflictError,
    EtcdComputeError,
    PlacementError,
    UsageError,
)
from etcd_compute.etcd import Entry, KeyValueStore
from etcd_compute.hosts import is_alive
from etcd_compute.instances import actions as action_txn
from etcd_compute.instances import records, states
from etcd_compute.ops import migrations
from etcd_compute.ops.operations import WaitTimeout, check_uuid, where
from etcd_compute.placement import CONCURRENT_UPDATE, PlacementClient
from etcd_compute.scheduler.request import RequestGroup, ResourceRequest, parse_query
from etcd_compute.scheduler.spec import IMAGE_URL, operator_name

ATTEMPTS = 5
# The actions asked here (a move to another host: ops/migrations.py).
ACTIONS = (states.STOP, states.START, states.SUSPEND, states.RESUME, states.PAUSE,
           states.UNPAUSE, states.REBOOT, states.REBUILD, states.RESIZE, states.SNAPSHOT,
           states.SECURITY_GROUPS, states.ATTACH_INTERFACE, states.DETACH_INTERFACE)


class NoRoom(EtcdComputeError):
    """A resize does not fit on the instance's host (nothing was changed)."""


@dataclass
class Requested:
    """An action written for its host: the request's id says when it is done."""

    uuid: str
    host: str
    action: str
    request: dict[str, Any]

    def as_dict(self) -> dict[str, Any]:
        return {"uuid": self.uuid, "host": self.host, "action": self.action,
                "request_id": self.request["id"]}


@dataclass
class Change:
    """What an action changes besides power: the request's parameters, and for a resize
    how to put its claim back if the write fails."""

    params: dict[str, Any]
    undo: Callable[[], Any] | None = None


Also = migrations.Also


def check_image(url: str | None) -> str | None:
    if url is not None and not IMAGE_URL.match(url):
        raise UsageError(f"--image {url[:100]!r}: expected an http(s):// or file:// URL of "
                         "printable ASCII, at most 2048 characters")
    return url


def resize_request(query: str, required: Collection[str] = ()) -> dict[str, int]:
    """The new size a resize QUERY asks for; UsageError for anything but resources (the
    instance stays on its host: no traits, aggregates, tree, groups or limit)."""
    parsed = parse_query(query)
    group = parsed.groups.get("")
    if set(parsed.groups) != {""} or group is None or group.constraints() or \
            parsed.group_policy or parsed.limit:
        raise UsageError("resize: the query may hold resources=... only (the instance stays "
                         "on its host)")
    missing = [rc for rc in required if rc not in group.resources]
    if missing:
        raise UsageError(f"resize: resources: {', '.join(missing)} missing; every instance "
                         f"claims {', '.join(required)} (scheduler.required_resources)")
    return dict(group.resources)


def resized_query(old: str | None, resources: dict[str, int]) -> str:
    """The spec's query with the new size: the first query's unnumbered traits and
    aggregates kept (granular groups are not: the size is one total now)."""
    try:
        group = parse_query(old).groups.get("") if old else None
    except UsageError:
        group = None
    group = dataclasses.replace(group or RequestGroup(""), resources=dict(resources))
    return ResourceRequest(groups={"": group}).to_query()


def _nothing() -> None:
    """No claim to undo (the actions that change none)."""


def _resources(resources: dict[str, int]) -> str:
    return ",".join(f"{rc}:{n}" for rc, n in sorted(resources.items()))


def _resize(placement: PlacementClient, spec: dict[str, Any], host: str, host_name: str,
            resources: dict[str, int], hold: str | None) -> Change:
    held, uuid = spec["resources"], spec["uuid"]
    if resources == held:
        raise UsageError(f"resize: the instance has {_resources(held)} already")
    if resources.get("DISK_GB", 0) < held.get("DISK_GB", 0):
        raise UsageError(f"resize: DISK_GB {held['DISK_GB']} -> {resources.get('DISK_GB', 0)}: "
                         "a disk cannot shrink")
    try:
        if hold is None:
            old, generation = claims.resize(placement, uuid, host, resources)
            undo = partial(claims.undo, placement, uuid, old, generation)
        else:
            old, generation = claims.resize_holding(placement, uuid, host, resources, hold)
            undo = partial(claims.undo_holding, placement, uuid, old, generation, hold)
    except PlacementError as exc:
        if isinstance(exc, ConflictError) and exc.code == CONCURRENT_UPDATE:
            raise  # the claim changed meanwhile: the caller reads it all again
        if isinstance(exc, ConflictError) and exc.code == claims.ELSEWHERE:
            raise states.ActionRefused(f"resize: {exc}; destroy it") from None
        # Placement's reason, without its boilerplate ("Unable to allocate inventory: ...").
        detail = str(exc).rsplit("Unable to allocate inventory", 1)[-1].lstrip(": ")
        raise NoRoom(f"resize to {_resources(resources)}: no room for it on its host "
                     f"{host_name}: {detail}"[:600]) from None
    params = {"resources": resources, "allocations": {host: {"resources": resources}},
              "query": resized_query(spec.get("query"), resources)}
    if hold is not None:
        params["hold"] = {"consumer": hold, "allocations": old, "resources": held}
    return Change(params, undo)


def _revert(placement: PlacementClient, spec: dict[str, Any], host: str,
            record: dict[str, Any]) -> Change:
    """Back to the size a held resize keeps: the claim first (the hold's allocations back
    to the instance, the hold freed, one request), then the host's resize."""
    hold, uuid = record["resize_hold"], spec["uuid"]
    if set(hold["allocations"]) != {host}:
        raise states.ActionRefused(f"instance {uuid} was rebuilt on another host since its "
                                   "resize; confirm the resize instead")
    try:
        claims.revert_holding(placement, uuid, hold["consumer"], hold["allocations"])
    except PlacementError as exc:
        if isinstance(exc, ConflictError) and exc.code == CONCURRENT_UPDATE:
            raise
        raise NoRoom(f"revert resize: no room for {_resources(hold['resources'])} on its "
                     f"host: {exc}"[:600]) from None
    # Undone by taking the new size again with the old one held, as the resize did.
    undo = partial(claims.resize_holding, placement, uuid, host, spec["resources"],
                   hold["consumer"])
    return Change({"resources": hold["resources"], "allocations": hold["allocations"],
                   "query": resized_query(spec.get("query"), hold["resources"]),
                   "reverts": hold["consumer"]}, undo)


def _change(placement: PlacementClient, action: str, spec: dict[str, Any], host: str,
            host_name: str, record: dict[str, Any], asked: Asked) -> Change:
    if action == states.REBOOT:
        return Change({"hard": asked.hard})
    if action == states.REBUILD and asked.image_for is not None:
        # An image in Glance: found (and checked against the instance's size) now.
        return Change({"image": asked.image_for(spec["resources"]), **asked.rebuild})
    if action == states.REBUILD:
        image = {"image": {"url": asked.image_url, "sha256": None}} if asked.image_url else {}
        return Change({**image, **asked.rebuild})
    if action == states.SNAPSHOT:
        assert asked.image_for is not None
        # The queued Glance image made for this snapshot ({image_id, name}).
        return Change({"snapshot": asked.image_for(spec)})
    if action == states.SECURITY_GROUPS:
        if asked.security_groups is None:
            raise UsageError("security-groups: the instance's new security groups are needed")
        if spec.get("network") is False:
            raise states.ActionRefused(f"instance {spec['uuid']} has no network interface: "
                                       "it is in no security group and can join none")
        return Change({"security_groups": list(asked.security_groups)})
    if action in (states.ATTACH_INTERFACE, states.DETACH_INTERFACE):
        if asked.nic is None:
            raise UsageError(f"{action}: the port (or network) is needed")
        return Change({"nic": dict(asked.nic)})
    if action == states.RESIZE and asked.revert:
        return _revert(placement, spec, host, record)
    if action == states.RESIZE:
        assert asked.resources is not None
        return _resize(placement, spec, host, host_name, asked.resources, asked.hold)
    return Change({})


@dataclass
class Asked:
    """An action's parameters: reboot `hard`; rebuild `image_url` (or `image_for`, an
    image in Glance) and the guest's new user data or key (`rebuild`: user_data, ssh_key,
    each None to remove); resize the new `resources`, the consumer that holds the old size
    until it is confirmed (`hold`, the compute API's resize), or `revert` of a held one;
    snapshot its image (`image_for`); security-groups the instance's new `security_groups`;
    attach-interface and detach-interface the port (`nic`: one item of the spec's
    networks; a detach's is {port})."""

    hard: bool = False
    image_url: str | None = None
    rebuild: dict[str, Any] = dataclasses.field(default_factory=dict)
    resources: dict[str, int] | None = None
    hold: str | None = None
    revert: bool = False
    security_groups: list[str] | None = None
    nic: dict[str, str] | None = None
    # A rebuild's image in Glance (given the instance's resources: the spec's `image`), or
    # a snapshot's queued image (given its spec): made when the request is written.
    image_for: Callable[[Any], dict[str, Any]] | None = None


def _write_request(store: KeyValueStore, entry: Entry, spec: dict[str, Any],
                   read: records.RecordRead, action: str, written: dict[str, Any],
                   also: Also | None) -> int | None:
    """The request into the host's spec, with the caller's writes (`also`), in one
    transaction; None when a compare failed."""
    return action_txn.request_action(store, entry, spec, read, action, written,
                                     also(written) if also else ([], []))


def _check_held(record: dict[str, Any] | None, action: str, asked: Asked, uuid: str) -> None:
    """A held resize waits for its confirm or revert: nothing else is asked meanwhile (a
    revert only then)."""
    held = (record or {}).get("resize_hold")
    if held and not (action == states.RESIZE and asked.revert):
        raise states.ActionRefused(f"instance {uuid} awaits the confirm or revert of its "
                                   f"resize: {action} is not allowed now")
    if asked.revert and not held:
        raise states.ActionRefused(f"instance {uuid} has no resize to revert")


def request(store: KeyValueStore, placement: PlacementClient, uuid: str, action: str, *,
            hard: bool = False, image_url: str | None = None,
            resources: dict[str, int] | None = None, asked: Asked | None = None,
            also: Also | None = None, by: str | None = None,
            image_for: Callable[[Any], dict[str, Any]] | None = None) -> Requested:
    """Ask the instance's host for `action`; ActionRefused (nothing written) when its state
    does not allow it or its host is down; NoRoom when a resize does not fit there.
    `asked`: the parameters (else `hard`, `image_url`, `resources`, `image_for`); `also`:
    writes of the caller's that go in the request's transaction (the compute API's view);
    `by`: who asks, if not this process's operator (the compute API's caller).
    `image_for`: a rebuild's image in Glance, given the instance's resources (the spec's
    `image`; UsageError if it cannot be booted at that size); for a snapshot, the queued
    Glance image made for it, given the instance's spec ({image_id, name})."""
    asked = asked or Asked(hard=hard, image_url=image_url, resources=resources)
    if image_for is not None:
        asked = dataclasses.replace(asked, image_for=image_for)
    if action == states.SNAPSHOT and asked.image_for is None:
        raise UsageError("snapshot: the Glance image to upload into is needed")
    check_uuid(uuid)
    check_image(asked.image_url)
    if action not in ACTIONS:
        raise UsageError(f"{action}: not a lifecycle action (one of {', '.join(ACTIONS)})")
    for _ in range(ATTEMPTS):
        host, _group, read = where(store, uuid)
        states.check_action(read.state, action, uuid)
        _check_held(read.record, action, asked, uuid)
        migrations.check_not_reverting(store, uuid)
        entry, spec = records.read_spec(store, host, uuid)
        if entry is None or spec is None:
            raise states.ActionRefused(f"instance {uuid} is {read.state} but its host holds "
                                          "no readable spec for it; destroy it")
        host_name = (read.record or {}).get("host_name") or host
        pending = spec.get("request")
        if spec["action"] in ("destroy", "evacuate") or (
                spec["action"] in states.ACTIONS and pending and
                (read.record or {}).get("request_id") != pending["id"]):
            raise states.ActionRefused(
                f"instance {uuid}: a {spec['action']} asked by "
                f"{(pending or {}).get('by') or 'someone'} is pending; try again when its "
                "host has done it")
        if not is_alive(store, host):
            raise states.ActionRefused(
                f"instance {uuid}: its host {host_name} is down (the controller recovers its "
                "instances); try again when it is back")
        try:
            change = _change(placement, action, spec, host, host_name, read.record or {},
                             asked)
        except ConflictError:
            continue  # its claim changed meanwhile: read it all again
        written = action_txn.new_request(by or operator_name(), **change.params)
        write = partial(_write_request, store, entry, spec, read, action, written, also)
        if claims.written_or_undone(write, change.undo or _nothing) is not None:
            return Requested(uuid, host, action, written)
    raise UsageError(f"instance {uuid} kept changing while asking for {action}; try again")


def confirm_resize(store: KeyValueStore, placement: PlacementClient, uuid: str,
                   also: Also | None = None, by: str | None = None) -> dict[str, Any]:
    """A held resize confirmed: its old size freed in Placement, then forgotten by the
    record (with `also`'s writes); the hold as it was. ActionRefused when there is none."""
    check_uuid(uuid)
    for _ in range(ATTEMPTS):
        _host, _group, read = where(store, uuid)
        hold = (read.record or {}).get("resize_hold")
        if not hold:
            raise states.ActionRefused(f"instance {uuid} has no resize to confirm")
        # Freed first: a confirm cut short here is done again (freeing nothing twice).
        claims.release_hold(placement, hold["consumer"])
        if action_txn.confirm_resize(store, read, by or operator_name(),
                                     also(hold) if also else ([], [])) is not None:
            return dict(hold)
    raise UsageError(f"instance {uuid} kept changing while confirming its resize; try again")


@dataclass
class Outcome:
    """How a request ended: the record then, and the request's event (None if the request
    was never taken up: destroyed or moved first)."""

    record: dict[str, Any] | None
    event: dict[str, Any] | None

    @property
    def ok(self) -> bool:
        return self.event is not None and self.event["result"] == events.SUCCESS

    @property
    def error(self) -> str:
        if self.event is not None:
            return self.event.get("error") or self.event["result"]
        state = (self.record or {}).get("state", "gone")
        return f"superseded: the instance is {state} now"


def wait(store: KeyValueStore, requested: Requested, timeout: float,
         on_change: Callable[[str, dict[str, Any] | None], None],
         interval: float = 0.2) -> Outcome:
    """Follow the record until the host has ended the request (or something else took
    over: destroy, a move); `on_change` on every state seen."""
    uuid, rid = requested.uuid, requested.request["id"]
    deadline = time.monotonic() + timeout
    seen: str | None = ""
    while True:
        host, read = records.find(store, uuid)
        record = read.record
        state = record["state"] if record else None
        if state != seen:
            seen = state
            on_change(uuid, record)
        taken = record is not None and record.get("request_id") == rid
        if record is None or (taken and state not in states.TRANSIENT) or \
                state in (states.DELETING, states.DELETED, states.ERROR) or \
                (host != requested.host):
            found = [e for e in events.read(store, host, uuid) if e.get("request_id") == rid] \
                if host else []
            return Outcome(record, found[-1] if found else None)
        if time.monotonic() > deadline:
            raise WaitTimeout(f"instance {uuid} still {state} after {timeout:g} s; the "
                              f"{requested.action} goes on without us")
        time.sleep(interval)


def instance_events(store: KeyValueStore, uuid: str) -> list[dict[str, Any]]:
    """What happened to the instance, oldest first; NotFound if it is known nowhere."""
    check_uuid(uuid)
    host, _group, _read = where(store, uuid)
    return events.read(store, host, uuid)


def revert_move(store: KeyValueStore, placement: PlacementClient, uuid: str,
                by: str | None = None, also: Also | None = None) -> Requested | None:
    """A cold move awaiting its confirm reverted (`migrations.revert`); nothing awaited
    (the compute API's 202). If the guest ran before the move, the controller starts the
    source's copy once the destination discarded its own (as Nova destroys the
    destination's guest before its source starts: never two copies running with one MAC
    and port): that start, to follow with `wait` (`also`: the compute API's view, in the
    revert's transaction); None when it did not run (nothing starts)."""
    done = migrations.revert(store, placement, uuid, by=by, also=also)
    if done.request is None:
        return None
    return Requested(uuid, done.source, states.START, done.request)

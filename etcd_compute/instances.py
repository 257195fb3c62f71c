"""The instance: its states, its record, the keys it owns, and one transaction per transition.

Scheduler, compute daemon and CLI all move instances through this module, so
what a transition writes (and what it compares first) is decided in one place.

    SCHEDULED -> BUILDING -> ACTIVE <-> SHUTOFF  ...  -> DELETING -> DELETED (record expires)
        \\            |  \\-> RESCHEDULING -> SCHEDULED on an alternate host (controller)
         \\           \\-> ERROR (allocation freed, nothing left) -> DELETING/removed
          \\-> ERROR / DELETING (a bad spec, a destroy before the build started)

    ACTIVE  -stop->    STOPPING   -> SHUTOFF      SHUTOFF -start-> STARTING -> ACTIVE
    ACTIVE  -reboot->  REBOOTING  -> ACTIVE
    ACTIVE|SHUTOFF -rebuild-> REBUILDING -> as it was;  -resize-> RESIZING -> as it was

An operator's action (`ACTIONS`) is allowed only from the states listed for
it, and refused before anything is written otherwise; destroy is allowed
from any state. The operator writes it into the host's spec with a request
id (`request_action`); the host takes it up (`begin_action`: the record
keeps the request as its `task` while it runs), and ends it in one
transaction (`end_action`), which on success also writes the action's
changes (size, image) into the spec. A failed action ends where it started.

Keys (see `keys.py`): on its host, the instance's spec, record, /booted/,
/console/ and /events/ keys, all under /hosts/<rp>/, which the host may
write; on the operator's side, its location `/instances/<uuid>` (which host
holds it) and, in a server group, `/groups/<name>/<uuid>`, which a host may
not touch. The operator's keys of an instance that ended are removed by
whoever next reads them (`forget`): the CLI, the scheduler reading a group,
the controller. Every write compares the revision it read, so an event
delivered twice never moves an instance twice. Transitions that something
happened with also append to the instance's events (`events.py`) in the same
transaction.
"""

from __future__ import annotations

import logging
import time
import uuid as uuidlib
from collections import Counter
from dataclasses import dataclass
from typing import Any

from etcd_compute import events, messages
from etcd_compute.errors import EtcdComputeError, InvalidMessage
from etcd_compute.etcd import (
    Compare,
    Delete,
    Entry,
    KeyValueStore,
    Op,
    Put,
    Txn,
    absent,
    none_created_since,
    put_message,
    unchanged,
)
from etcd_compute.keys import RECORDS, SPECS, Keys

LOG = logging.getLogger(__name__)

SCHEDULED = "SCHEDULED"
BUILDING = "BUILDING"
ACTIVE = "ACTIVE"
# Powered off, by an operator's stop or on its own; its disk, claim and IP are kept.
SHUTOFF = "SHUTOFF"
ERROR = "ERROR"
DELETING = "DELETING"
DELETED = "DELETED"
# The build failed here; the controller (schedule.py serve) moves it to an alternate host.
RESCHEDULING = "RESCHEDULING"
# An operator's action running on the host (the record's `task` says which).
STOPPING = "STOPPING"
STARTING = "STARTING"
REBOOTING = "REBOOTING"
REBUILDING = "REBUILDING"
RESIZING = "RESIZING"

STATES = (SCHEDULED, BUILDING, ACTIVE, SHUTOFF, STOPPING, STARTING, REBOOTING, REBUILDING,
          RESIZING, RESCHEDULING, ERROR, DELETING, DELETED)
# States `schedule.py --wait` stops at (ACTIVE can still change: destroy).
FINAL = frozenset({ACTIVE, ERROR, DELETED})
# An operator's action in progress.
TRANSIENT = frozenset({STOPPING, STARTING, REBOOTING, REBUILDING, RESIZING})
# States in which a driver may hold the instance.
LIVE = frozenset({BUILDING, ACTIVE, SHUTOFF, DELETING}) | TRANSIENT

STOP, START, REBOOT, REBUILD, RESIZE, DESTROY = (
    "stop", "start", "reboot", "rebuild", "resize", "destroy")
# An operator's action: the state it passes through, the states it may start from.
ACTIONS: dict[str, tuple[str, frozenset[str]]] = {
    STOP: (STOPPING, frozenset({ACTIVE})),
    START: (STARTING, frozenset({SHUTOFF})),
    REBOOT: (REBOOTING, frozenset({ACTIVE})),
    REBUILD: (REBUILDING, frozenset({ACTIVE, SHUTOFF})),
    RESIZE: (RESIZING, frozenset({ACTIVE, SHUTOFF})),
}
# Where a successful action ends; rebuild and resize end as they started.
ENDS = {STOP: SHUTOFF, START: ACTIVE, REBOOT: ACTIVE}

# Allowed moves; None is "no record yet" (a spec written without one, or unreadable).
# From a transient state: its end (ACTIVE or SHUTOFF), a destroy, ERROR, or SCHEDULED on
# another host (its host died mid-action).
_ENDS_OF_AN_ACTION = frozenset({ACTIVE, SHUTOFF, SCHEDULED, ERROR, DELETING, DELETED})
TRANSITIONS: dict[str | None, frozenset[str]] = {
    None: frozenset({SCHEDULED, BUILDING, ERROR, DELETING, DELETED}),
    # -> SCHEDULED from SCHEDULED, BUILDING, ACTIVE, SHUTOFF: evacuated (its host died)
    # elsewhere. -> RESCHEDULING: its host gave it up (a failed build, a drain).
    SCHEDULED: frozenset({SCHEDULED, BUILDING, RESCHEDULING, ERROR, DELETING, DELETED}),
    # -> SHUTOFF: built powered off (an instance that was stopped, built again elsewhere).
    BUILDING: frozenset({SCHEDULED, ACTIVE, SHUTOFF, RESCHEDULING, ERROR, DELETING, DELETED}),
    # The controller moves it (SCHEDULED elsewhere), or gives up (ERROR).
    RESCHEDULING: frozenset({SCHEDULED, ERROR, DELETING, DELETED}),
    # -> SHUTOFF / ACTIVE without an action: the hypervisor saw the guest stop or start.
    ACTIVE: frozenset({SCHEDULED, RESCHEDULING, ERROR, DELETING, DELETED, SHUTOFF, STOPPING,
                       REBOOTING, REBUILDING, RESIZING}),
    SHUTOFF: frozenset({SCHEDULED, RESCHEDULING, ERROR, DELETING, DELETED, ACTIVE, STARTING,
                        REBUILDING, RESIZING}),
    **{state: _ENDS_OF_AN_ACTION for state in TRANSIENT},
    ERROR: frozenset({ERROR, DELETING, DELETED}),
    DELETING: frozenset({ERROR, DELETED}),
    # Finishing a destroy again is idempotent.
    DELETED: frozenset({DELETED}),
}


class InvalidTransition(EtcdComputeError):
    """An instance was asked to move to a state it cannot reach from where it is."""


def check_transition(current: str | None, target: str) -> None:
    if target not in TRANSITIONS[current]:
        raise InvalidTransition(f"instance cannot go from {current or 'no record'} to {target}")


class ActionRefused(EtcdComputeError):
    """An operator's action is not allowed in the instance's state (nothing was written)."""


def allowed_actions(state: str | None) -> list[str]:
    """The operator's actions allowed in `state` (destroy always)."""
    return [a for a, (_, starts) in ACTIONS.items() if state in starts] + [DESTROY]


def check_action(state: str | None, action: str, uuid: str = "") -> None:
    """ActionRefused naming the state and what is allowed in it, unless `action` is."""
    if action == DESTROY or state in ACTIONS[action][1]:
        return
    what = f"instance {uuid}" if uuid else "the instance"
    raise ActionRefused(f"{what} is {state or 'without a record'}: {action} is not allowed "
                        f"now (allowed: {', '.join(allowed_actions(state))})")


def wants_stopped(record: dict[str, Any] | None, spec: dict[str, Any]) -> bool:
    """Whether the instance should be powered off when built again (elsewhere): stopped,
    being stopped, or in an action that started from SHUTOFF; a build keeps its spec's."""
    if record is None or record["state"] in (SCHEDULED, BUILDING, RESCHEDULING):
        return bool(spec.get("stopped"))
    task = record.get("task")
    if record["state"] in TRANSIENT and task:
        return task["action"] == STOP or (task["action"] != START and task["from"] == SHUTOFF)
    return record["state"] == SHUTOFF


# --- records -------------------------------------------------------------------------------


def new_record(spec: dict[str, Any], state: str, host_name: str | None = None) -> dict[str, Any]:
    """A first record for the instance in `spec`."""
    check_transition(None, state)
    now = time.time()
    return {
        "uuid": spec["uuid"],
        "state": state,
        "name": spec.get("name"),
        "host": spec["host"],
        "host_name": host_name,
        "ip": None,
        "error": None,
        "resources": spec["resources"],
        "image": spec.get("image", {}).get("url"),
        "group": (spec.get("group") or {}).get("name"),
        "created_at": spec.get("requested_at", now),
        "updated_at": now,
        **{owner: spec[owner] for owner in ("project_id", "user_id") if owner in spec},
    }


def moved(record: dict[str, Any], state: str, **fields: Any) -> dict[str, Any]:
    """`record` in `state`, with `fields` changed and a fresh updated_at (and no task once
    out of an action)."""
    check_transition(record["state"], state)
    changed = {**record, **fields, "state": state, "updated_at": time.time()}
    if state not in TRANSIENT:
        changed.pop("task", None)
    return changed


def error_record(uuid: str, host: str | None, reason: str) -> dict[str, Any]:
    """An ERROR record for an instance whose spec could not even be read."""
    now = time.time()
    return {"uuid": uuid, "state": ERROR, "host": host, "error": reason,
            "created_at": now, "updated_at": now}


@dataclass
class RecordRead:
    """A record as read: None when absent or unreadable (`fault` says why)."""

    record: dict[str, Any] | None
    revision: int
    fault: str | None = None

    @property
    def state(self) -> str | None:
        return self.record["state"] if self.record else None


def read_record(store: KeyValueStore, host: str, uuid: str) -> RecordRead:
    """The record of `uuid` on `host` and its revision; an unreadable one reads as absent
    (with a fault), at its real revision, so the next write replaces it."""
    entry = store.get(store.keys.record(host, uuid))
    if entry is None:
        return RecordRead(None, 0)
    try:
        return RecordRead(messages.decode(messages.INSTANCE_RECORD, entry.value),
                          entry.mod_revision)
    except InvalidMessage as exc:
        return RecordRead(None, entry.mod_revision, str(exc))


def locate(store: KeyValueStore, uuid: str) -> dict[str, Any] | None:
    """Where `uuid` is ({"host": rp, "group": ...}), or None if it is known nowhere."""
    try:
        location, _ = store.read(messages.INSTANCE_LOCATION, store.keys.location(uuid))
    except InvalidMessage:
        return None
    return location


def find(store: KeyValueStore, uuid: str) -> tuple[str | None, RecordRead]:
    """(host, record) of `uuid`, from its location; without one (a spec written straight to a
    host, then rejected), from a search of the hosts' records. (None, absent) if unknown."""
    location = locate(store, uuid)
    if location is not None:
        return location["host"], read_record(store, location["host"], uuid)
    entries, _ = store.get_prefix(store.keys.hosts(), keys_only=True)
    for entry in entries:
        parsed = store.keys.parse_host_key(entry.key)
        if parsed is not None and parsed.kind == RECORDS and parsed.uuid == uuid:
            return parsed.host, read_record(store, parsed.host, uuid)
    return None, RecordRead(None, 0)


def group_members(store: KeyValueStore, name: str) -> tuple[dict[str, dict[str, Any]], int]:
    """The live members of server group `name` ({uuid: member}) and the revision they were
    read at. Members that ended (ERROR, DELETED) do not count; those whose record is gone
    are forgotten here (their host could not remove the operator's keys)."""
    entries, revision = store.get_prefix(store.keys.group(name))
    live: dict[str, dict[str, Any]] = {}
    for entry in entries:
        uuid = entry.key.rsplit("/", 1)[-1]
        try:
            member = messages.decode(messages.GROUP_MEMBER, entry.value)
        except InvalidMessage:
            continue
        read = read_record(store, member["host"], uuid)
        if read.record is None and read.fault is None and \
                forget(store, uuid, member["host"], name) is not None:
            continue  # it ended and is forgotten
        if read.state not in (ERROR, DELETED):
            live[uuid] = member
    return live, revision


def count_by_host(store: KeyValueStore) -> Counter[str]:
    """Instances per host, from the spec keys (one keys-only read)."""
    entries, _ = store.get_prefix(store.keys.hosts(), keys_only=True)
    counts: Counter[str] = Counter()
    for entry in entries:
        parsed = store.keys.parse_host_key(entry.key)
        if parsed is not None and parsed.kind == SPECS:
            counts[parsed.host] += 1
    return counts


# --- keys ----------------------------------------------------------------------------------


def host_keys(keys: Keys, host: str, uuid: str) -> list[str]:
    """The instance's keys on its host besides its record and events: what the host removes
    at the end (the events stay as long as the record)."""
    return [keys.spec(host, uuid), keys.booted(host, uuid), keys.console(host, uuid)]


def operator_keys(keys: Keys, uuid: str, group: str | None) -> list[str]:
    """The instance's keys only the operator's side writes: its location, group member and
    the compute API's view of it (`/servers/`, when the API made it)."""
    owned = [keys.location(uuid), keys.server(uuid)]
    if group:
        owned.append(keys.group_member(group, uuid))
    return owned


def _placed(keys: Keys, spec: dict[str, Any], record: dict[str, Any],
            log: events.Events | None = None) -> list[Op]:
    """Spec and record on the host, location and group membership: an instance placed."""
    uuid, host = spec["uuid"], spec["host"]
    group = (spec.get("group") or {}).get("name")
    ops: list[Op] = [
        put_message(messages.INSTANCE_SPEC, keys.spec(host, uuid), spec),
        put_message(messages.INSTANCE_RECORD, keys.record(host, uuid), record),
        put_message(messages.INSTANCE_LOCATION, keys.location(uuid),
                    {"host": host, "group": group, "created_at": record["created_at"]}),
    ]
    if group:
        ops.append(put_message(messages.GROUP_MEMBER, keys.group_member(group, uuid),
                               {"host": host, "policy": spec["group"]["policy"]}))
    if log:
        ops.append(events.put(keys, host, uuid, log))
    return ops


def _record_put(keys: Keys, record: dict[str, Any], lease: int | None = None) -> Op:
    return put_message(messages.INSTANCE_RECORD, keys.record(record["host"], record["uuid"]),
                       record, lease)


def _host_deletes(keys: Keys, host: str, uuid: str) -> list[Op]:
    return [Delete(key) for key in host_keys(keys, host, uuid)]


def _spec_put(keys: Keys, spec: dict[str, Any]) -> Op:
    return put_message(messages.INSTANCE_SPEC, keys.spec(spec["host"], spec["uuid"]), spec)


def _who(spec: dict[str, Any]) -> str | None:
    return (spec.get("request") or {}).get("by")


def _request_id(spec: dict[str, Any]) -> str | None:
    return (spec.get("request") or {}).get("id")


def new_request(by: str | None, **params: Any) -> dict[str, Any]:
    """An operator's request (a spec's `request`): a fresh id, who, when, its parameters."""
    return {"id": str(uuidlib.uuid4()), "by": by, "at": time.time(), **params}


# --- transitions: each one transaction -------------------------------------------------------


def schedule(store: KeyValueStore, placed: list[tuple[dict[str, Any], str | None]],
             group: tuple[str, int] | None = None) -> int | None:
    """New instances: (spec, host name) each -> spec, SCHEDULED record, location, member.

    One transaction for the whole request. It compares that the instances are
    known nowhere yet and, for a server group read at revision R, that no member
    was added since (`group` = (group name, R)). Returns its revision, or None if
    a compare failed.
    """
    return store.commit(schedule_txn(store.keys, placed, group))


def schedule_txn(keys: Keys, placed: list[tuple[dict[str, Any], str | None]],
                 group: tuple[str, int] | None = None,
                 servers: list[dict[str, Any]] | None = None) -> Txn:
    """The transaction `schedule` commits (built first when its size must be checked);
    `servers`: the compute API's view of each instance, in the order of `placed`."""
    txn = Txn()
    for spec, host_name in placed:
        # Fresh uuid4s cannot collide; the compare still guards against a rerun.
        txn.compare.append(absent(keys.location(spec["uuid"])))
        txn.success += _placed(keys, spec, new_record(spec, SCHEDULED, host_name))
    for server in servers or []:
        # The API's view of a request that failed may exist (its fault): the instance
        # wins only if none is there.
        txn.compare.append(absent(keys.server(server["uuid"])))
        txn.success.append(put_message(messages.SERVER, keys.server(server["uuid"]), server))
    if group is not None:
        txn.compare.append(none_created_since(keys.group(group[0]), group[1]))
    return txn


def unschedule(store: KeyValueStore,
               placed: list[tuple[str, str, str | None, int, int]]) -> int | None:
    """SCHEDULED -> as if never scheduled: take back instances nobody has acted on yet.

    `placed`: (host, uuid, group, record revision, spec revision) as read. One
    transaction removes each one's spec, record (and events), location and group member, if no
    record or spec moved since (a host that began a build moved its record; then
    it must be destroyed through its host instead). A request across zones undoes
    what it wrote in one zone this way when another zone failed.
    """
    return store.commit(unschedule_txn(store.keys, placed))


def unschedule_txn(keys: Keys, placed: list[tuple[str, str, str | None, int, int]]) -> Txn:
    """`unschedule`'s transaction (a caller keeps it within etcd's --max-txn-ops: it
    deletes about twice as many keys per instance as `schedule` wrote)."""
    txn = Txn()
    for host, uuid, group, record_revision, spec_revision in placed:
        txn.compare += [Compare(keys.record(host, uuid), "mod", "==", record_revision),
                        Compare(keys.spec(host, uuid), "mod", "==", spec_revision)]
        txn.success += [Delete(keys.record(host, uuid)), Delete(keys.events(host, uuid)),
                        *_host_deletes(keys, host, uuid),
                        *(Delete(key) for key in operator_keys(keys, uuid, group))]
    return txn


def operations(count: int, grouped: bool, served: bool = False) -> int:
    """Writes in `schedule`'s transaction for `count` instances (compares are fewer);
    `served`: with the compute API's view of each."""
    return count * (3 + grouped + served)


def begin_build(store: KeyValueStore, spec: dict[str, Any], spec_revision: int,
                read: RecordRead, host_name: str) -> int | None:
    """-> BUILDING on `spec["host"]`, if neither record nor spec moved since they were read."""
    keys, uuid, host = store.keys, spec["uuid"], spec["host"]
    building = (moved(read.record, BUILDING, host=host, host_name=host_name)
                if read.record else new_record(spec, BUILDING, host_name))
    success = [_record_put(keys, building)]
    if read.state != BUILDING:  # a new attempt, not one resumed after a restart
        log = events.read(store, host, uuid)
        first = not log
        success.append(events.put(keys, host, uuid, events.append(log, events.event(
            "create" if first else "build", host, host_name, by=spec.get("requested_by"),
            started_at=spec.get("requested_at") if first else None))))
    return store.commit(Txn(
        [unchanged(keys.record(host, uuid), read.revision),
         Compare(keys.spec(host, uuid), "mod", "==", spec_revision)],
        success,
    ))


def activate(store: KeyValueStore, read: RecordRead, ip: str | None,
             stopped: bool = False) -> int | None:
    """BUILDING -> ACTIVE with its IP (also on /booted/, as in the original toy); SHUTOFF
    when the spec asked for it powered off."""
    assert read.record is not None
    keys, record = store.keys, read.record
    host, uuid = record["host"], record["uuid"]
    log = events.end(events.read(store, host, uuid), ("create", "build"), events.SUCCESS,
                     detail=f"ip {ip}" if ip else None,
                     otherwise=events.event("build", host, record.get("host_name")))
    success = [_record_put(keys, moved(record, SHUTOFF if stopped else ACTIVE, ip=ip,
                                       error=None)),
               events.put(keys, host, uuid, log)]
    if ip:
        # /booted/ holds the bare IP, the original toy's format, not a JSON message.
        success.append(Put(keys.booted(host, uuid), ip))
    return store.commit(Txn([unchanged(keys.record(host, uuid), read.revision)], success))


def host_down(keys: Keys, host: str) -> Compare:
    """Guards what the operator's side does to a dead host's instances: the host did not
    come back (its heartbeat key is still gone) when the transaction runs."""
    return absent(keys.alive(host))


def fail(store: KeyValueStore, spec: dict[str, Any], read: RecordRead, reason: str,
         guard: tuple[Compare, ...] = (), action: str = "build",
         by: str | None = None) -> int | None:
    """-> ERROR with `reason`; the host's other keys go. The caller freed the claim. The
    running event ends in error (or one for `action`, by `by`, is added)."""
    keys, uuid, host = store.keys, spec["uuid"], spec["host"]
    failed = (moved(read.record, ERROR, error=reason) if read.record
              else error_record(uuid, host, reason))
    log = events.end(events.read(store, host, uuid), ("create", "build", action), events.ERROR,
                     reason, otherwise=events.event(action, host, failed.get("host_name"),
                                                    by=by))
    return store.commit(Txn([unchanged(keys.record(host, uuid), read.revision), *guard],
                            [_record_put(keys, failed), events.put(keys, host, uuid, log),
                             *_host_deletes(keys, host, uuid)]))


def reject(store: KeyValueStore, rp_uuid: str, uuid: str, spec_revision: int,
           reason: str) -> int | None:
    """A spec nobody can act on: ERROR record with the reason, spec key dropped."""
    keys = store.keys
    spec_key = keys.spec(rp_uuid, uuid)
    log = events.append(events.read(store, rp_uuid, uuid),
                        events.event("reject", rp_uuid, result=events.ERROR, error=reason))
    return store.commit(Txn([Compare(spec_key, "mod", "==", spec_revision)],
                            [_record_put(keys, error_record(uuid, rp_uuid, reason)),
                             events.put(keys, rp_uuid, uuid, log), Delete(spec_key)]))


def drop_key(store: KeyValueStore, key: str, revision: int) -> int | None:
    """Remove a key that is not an instance's (if it did not change since it was read)."""
    return store.commit(Txn([Compare(key, "mod", "==", revision)], [Delete(key)]))


def hand_over(store: KeyValueStore, spec: dict[str, Any], read: RecordRead, reason: str,
              evacuating: bool = False) -> int | None:
    """-> RESCHEDULING: this host gives the instance up (its build failed, or a drain
    evacuated it) and the controller is asked to move it (a host may not write another
    host's keys). The claim stays as it is; the spec says whether to build it powered off
    (it was stopped), compared at the revision it has now."""
    assert read.record is not None
    keys, record = store.keys, read.record
    host, uuid = spec["host"], spec["uuid"]
    log = events.read(store, host, uuid)
    if evacuating:
        log = events.append(log, events.event(
            "evacuate", host, record.get("host_name"), by=_who(spec),
            request_id=_request_id(spec), result=events.SUCCESS, detail=reason))
    else:
        log = events.end(log, ("create", "build"), events.ERROR, reason,
                         otherwise=events.event("build", host, record.get("host_name")))
    compare = [unchanged(keys.record(host, uuid), read.revision)]
    success = [_record_put(keys, moved(record, RESCHEDULING, error=reason)),
               events.put(keys, host, uuid, log)]
    stopped = wants_stopped(record, spec)
    if stopped != bool(spec.get("stopped")):
        entry = store.get(keys.spec(host, uuid))
        compare.append(unchanged(keys.spec(host, uuid), entry.mod_revision if entry else 0))
        success.append(_spec_put(keys, {**spec, "stopped": stopped}))
    return store.commit(Txn(compare, success))


def mark_deleting(store: KeyValueStore, spec: dict[str, Any], read: RecordRead) -> int | None:
    """-> DELETING (a destroy was asked for; an action running is cut short)."""
    keys, host, uuid = store.keys, spec["host"], spec["uuid"]
    deleting = (moved(read.record, DELETING) if read.record
                else new_record(spec, DELETING))
    asked = spec.get("action") == DESTROY
    log = events.append(
        events.close(events.read(store, host, uuid), "cancelled: destroy asked"),
        events.event(DESTROY, host, deleting.get("host_name"), by=_who(spec) if asked else None,
                     request_id=_request_id(spec) if asked else None))
    return store.commit(Txn([unchanged(keys.record(host, uuid), read.revision)],
                            [_record_put(keys, deleting), events.put(keys, host, uuid, log)]))


def delete(store: KeyValueStore, spec: dict[str, Any], read: RecordRead, ttl: int,
           guard: tuple[Compare, ...] = (), detail: str | None = None) -> int | None:
    """-> DELETED, a record (and events) that expire after `ttl` s; the host's other keys
    go."""
    keys, host, uuid = store.keys, spec["host"], spec["uuid"]
    deleted = (moved(read.record, DELETED, ip=None) if read.record
               else new_record(spec, DELETED))
    log = events.end(events.read(store, host, uuid), DESTROY, events.SUCCESS, detail=detail,
                     otherwise=events.event(DESTROY, host, deleted.get("host_name"),
                                            by=_who(spec), request_id=_request_id(spec)))
    lease = store.grant(ttl)
    return store.commit(Txn(list(guard), [_record_put(keys, deleted, lease),
                                          events.put(keys, host, uuid, log, lease),
                                          *_host_deletes(keys, host, uuid)]))


def _moved_away(store: KeyValueStore, spec: dict[str, Any], read: RecordRead,
                moved_spec: dict[str, Any], record: dict[str, Any], action: str,
                guard: list[Compare]) -> int | None:
    """The instance's keys from its host to `moved_spec["host"]`, events carried along."""
    keys, uuid, old = store.keys, spec["uuid"], spec["host"]
    log = events.append(
        events.close(events.read(store, old, uuid), f"its host {old} gave it up"),
        events.event(action, old, (read.record or {}).get("host_name"), by=events.CONTROLLER,
                     result=events.SUCCESS, detail=f"placed on {moved_spec['host']}"))
    return store.commit(Txn(
        [unchanged(keys.record(old, uuid), read.revision), *guard],
        [*_host_deletes(keys, old, uuid), Delete(keys.record(old, uuid)),
         Delete(keys.events(old, uuid)), *_placed(keys, moved_spec, record, log)],
    ))


def finish_destroy_on_dead_host(store: KeyValueStore, spec: dict[str, Any], read: RecordRead,
                                ttl: int, detail: str | None = None) -> int | None:
    """A destroy nobody will carry out (the host is down) -> DELETED, by the operator's
    side: only if the host is still down and the record is as it was read (the
    controller may have moved the instance meanwhile). The caller frees the claim after
    this succeeds, never before: a moved instance keeps its claim."""
    return delete(store, spec, read, ttl,
                  guard=(host_down(store.keys, spec["host"]),
                         unchanged(store.keys.record(spec["host"], spec["uuid"]),
                                   read.revision)), detail=detail)


def _spec_unchanged(keys: Keys, spec: dict[str, Any], revision: int | None) -> list[Compare]:
    """The spec as it was read (a destroy written meanwhile must not be moved away)."""
    if revision is None:
        return []
    return [Compare(keys.spec(spec["host"], spec["uuid"]), "mod", "==", revision)]


def move(store: KeyValueStore, spec: dict[str, Any], read: RecordRead, host: str,
         allocations: dict[str, Any], alternates: list[dict[str, Any]],
         spec_revision: int | None = None) -> int | None:
    """RESCHEDULING on spec's host -> SCHEDULED on `host` (the operator's side: it writes
    another host's keys). Spec, record, events, location and membership move in one
    transaction, if record and spec (at `spec_revision`) are as they were read; the caller
    moved the claim first (one Placement call)."""
    assert read.record is not None
    moved_spec = {**spec, "action": "build", "host": host, "allocations": allocations,
                  "alternates": alternates}
    moved_spec.pop("request", None)
    record = moved(read.record, SCHEDULED, host=host, host_name=None, error=None)
    return _moved_away(store, spec, read, moved_spec, record, "reschedule",
                       _spec_unchanged(store.keys, spec, spec_revision))


def evacuate(store: KeyValueStore, spec: dict[str, Any], read: RecordRead, host: str,
             allocations: dict[str, Any], spec_revision: int | None = None) -> int | None:
    """An instance of a dead host -> SCHEDULED on `host`, to be built anew from its image
    (its disk was local: it is lost), powered off if it was stopped. Spec (a build),
    record, events, location and membership move in one transaction, only if the dead
    host has not come back and neither record nor spec (at `spec_revision`) changed since
    they were read. The caller moved the claim first."""
    assert read.record is not None
    rebuilt = {**spec, "action": "build", "host": host, "allocations": allocations,
               "alternates": [], "stopped": wants_stopped(read.record, spec)}
    rebuilt.pop("request", None)
    record = moved(read.record, SCHEDULED, host=host, host_name=None, ip=None, error=None)
    return _moved_away(store, spec, read, rebuilt, record, "recover",
                       [host_down(store.keys, spec["host"]),
                        *_spec_unchanged(store.keys, spec, spec_revision)])


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
                   action: str, request: dict[str, Any]) -> int | None:
    """The operator's stop, start, reboot, rebuild or resize: the host's spec rewritten with
    it, if neither spec nor record moved since they were read. ActionRefused (nothing
    written) when the record's state does not allow it."""
    check_action(read.state, action, spec["uuid"])
    record_key = store.keys.record(spec["host"], spec["uuid"])
    return _rewrite_spec(store, entry, {**spec, "action": action, "request": request},
                         (unchanged(record_key, read.revision),))


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
    log = events.append(events.read(store, host, uuid), events.event(
        action, host, record.get("host_name"), by=request.get("by"), request_id=request["id"],
        started_at=request["at"]))
    return store.commit(Txn(
        [unchanged(keys.record(host, uuid), read.revision),
         Compare(keys.spec(host, uuid), "mod", "==", spec_revision)],
        [_record_put(keys, record), events.put(keys, host, uuid, log)]))


def end_action(store: KeyValueStore, read: RecordRead, spec_entry: Entry | None,
               error: str | None = None, ip: str | None = None) -> int | None:
    """The action's state -> where it ends (`ENDS`, or where it started), in one transaction
    compared with the record and spec as read. Success writes the action's changes (size,
    image) into the record and the spec; an error leaves both as they were."""
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
    else:
        state = task["from"]
    if ip:
        fields["ip"] = ip
    log = events.end(events.read(store, host, uuid), action,
                     events.SUCCESS if error is None else events.ERROR, error,
                     otherwise=events.event(action, host, record.get("host_name"),
                                            request_id=task["id"]))
    compare = [unchanged(keys.record(host, uuid), read.revision)]
    success = [_record_put(keys, moved(record, state, **fields)),
               events.put(keys, host, uuid, log)]
    changes = {k: task[k] for k in ("resources", "allocations", "image", "query") if k in task}
    if error is None and changes and spec_entry is not None:
        spec = messages.decode(messages.INSTANCE_SPEC, spec_entry.value)
        compare.append(Compare(spec_entry.key, "mod", "==", spec_entry.mod_revision))
        success.append(_spec_put(keys, {**spec, **changes}))
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
        spec["action"], host, record.get("host_name"), by=request.get("by"),
        request_id=request.get("id"), result=events.REFUSED, error=reason))
    return store.commit(Txn(
        [unchanged(keys.record(host, uuid), read.revision),
         Compare(keys.spec(host, uuid), "mod", "==", spec_revision)],
        [_record_put(keys, record), events.put(keys, host, uuid, log)]))


def power_changed(store: KeyValueStore, read: RecordRead, running: bool, why: str,
                  crashed: bool = False) -> int | None:
    """ACTIVE <-> SHUTOFF without an action: the hypervisor saw the guest stop (on its own,
    crashed, or stopped behind our back) or start."""
    assert read.record is not None
    keys, record = store.keys, read.record
    host, uuid = record["host"], record["uuid"]
    log = events.append(events.read(store, host, uuid), events.event(
        "power-on" if running else "power-off", host, record.get("host_name"),
        by=events.HYPERVISOR, result=events.ERROR if crashed else events.SUCCESS,
        error=why if crashed else None, detail=None if crashed else why))
    return store.commit(Txn([unchanged(keys.record(host, uuid), read.revision)],
                            [_record_put(keys, moved(record, ACTIVE if running else SHUTOFF)),
                             events.put(keys, host, uuid, log)]))


def remove(store: KeyValueStore, uuid: str, host: str | None, group: str | None) -> int | None:
    """Forget an instance no host holds (ERROR, or its host is gone): every key it has."""
    keys = store.keys
    ops: list[Op] = [Delete(k) for k in operator_keys(keys, uuid, group)]
    if host:
        ops += [Delete(keys.record(host, uuid)), Delete(keys.events(host, uuid)),
                *_host_deletes(keys, host, uuid)]
    return store.commit(Txn([], ops))


def forget(store: KeyValueStore, uuid: str, host: str, group: str | None) -> int | None:
    """Remove the operator's keys (location, member) of an instance whose record is gone from
    `host`, if it is still gone and still located there (not moved meanwhile)."""
    keys = store.keys
    entry = store.get(keys.location(uuid))
    location = None
    if entry is not None:
        try:
            location = messages.decode(messages.INSTANCE_LOCATION, entry.value)
        except InvalidMessage:
            location = {"host": host}  # unreadable: as good as gone
    compare = [absent(keys.record(host, uuid)), absent(keys.spec(host, uuid))]
    if entry is not None:
        if location is None or location["host"] != host:
            return None
        compare.append(Compare(keys.location(uuid), "mod", "==", entry.mod_revision))
    return store.commit(Txn(compare, [Delete(k) for k in operator_keys(keys, uuid, group)]))

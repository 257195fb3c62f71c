"""The instance: its states, its record, the keys it owns, and one transaction per transition.

Scheduler, compute daemon and CLI all move instances through this module, so
what a transition writes (and what it compares first) is decided in one place.

    SCHEDULED -> BUILDING -> ACTIVE -> DELETING -> DELETED (record expires)
        \\            |  \\-> RESCHEDULING -> SCHEDULED on an alternate host (controller)
         \\           \\-> ERROR (allocation freed, nothing left) -> DELETING/removed
          \\-> ERROR / DELETING (a bad spec, a destroy before the build started)

Keys (see `keys.py`): on its host, the instance's spec, record, /booted/ and
/console/ keys, all under /hosts/<rp>/, which the host may write; on the
operator's side, its location `/instances/<uuid>` (which host holds it) and,
in a server group, `/groups/<name>/<uuid>`, which a host may not touch. The
operator's keys of an instance that ended are removed by whoever next reads
them (`forget`): the CLI, the scheduler reading a group, the controller.
Every write compares the revision it read, so an event delivered twice never
moves an instance twice.
"""

from __future__ import annotations

import logging
import time
from collections import Counter
from dataclasses import dataclass
from typing import Any

from etcd_compute import messages
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
ERROR = "ERROR"
DELETING = "DELETING"
DELETED = "DELETED"
# The build failed here; the controller (schedule.py serve) moves it to an alternate host.
RESCHEDULING = "RESCHEDULING"

STATES = (SCHEDULED, BUILDING, ACTIVE, RESCHEDULING, ERROR, DELETING, DELETED)
# States `schedule.py --wait` stops at (ACTIVE can still change: destroy).
FINAL = frozenset({ACTIVE, ERROR, DELETED})
# States in which a driver may hold the instance.
LIVE = frozenset({BUILDING, ACTIVE, DELETING})

# Allowed moves; None is "no record yet" (a spec written without one, or unreadable).
TRANSITIONS: dict[str | None, frozenset[str]] = {
    None: frozenset({SCHEDULED, BUILDING, ERROR, DELETING, DELETED}),
    # -> SCHEDULED from SCHEDULED, BUILDING, ACTIVE: evacuated (its host died) elsewhere.
    # -> RESCHEDULING: its host gave it up (a failed build, an evacuation for a drain).
    SCHEDULED: frozenset({SCHEDULED, BUILDING, RESCHEDULING, ERROR, DELETING, DELETED}),
    BUILDING: frozenset({SCHEDULED, ACTIVE, RESCHEDULING, ERROR, DELETING, DELETED}),
    # The controller moves it (SCHEDULED elsewhere), or gives up (ERROR).
    RESCHEDULING: frozenset({SCHEDULED, ERROR, DELETING, DELETED}),
    ACTIVE: frozenset({SCHEDULED, RESCHEDULING, ERROR, DELETING, DELETED}),
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
    }


def moved(record: dict[str, Any], state: str, **fields: Any) -> dict[str, Any]:
    """`record` in `state`, with `fields` changed and a fresh updated_at."""
    check_transition(record["state"], state)
    return {**record, **fields, "state": state, "updated_at": time.time()}


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
    """The instance's keys on its host besides its record: what the host removes at the end."""
    return [keys.spec(host, uuid), keys.booted(host, uuid), keys.console(host, uuid)]


def operator_keys(keys: Keys, uuid: str, group: str | None) -> list[str]:
    """The instance's keys only the operator's side writes: its location and group member."""
    owned = [keys.location(uuid)]
    if group:
        owned.append(keys.group_member(group, uuid))
    return owned


def _placed(keys: Keys, spec: dict[str, Any], record: dict[str, Any]) -> list[Op]:
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
    return ops


def _record_put(keys: Keys, record: dict[str, Any], lease: int | None = None) -> Op:
    return put_message(messages.INSTANCE_RECORD, keys.record(record["host"], record["uuid"]),
                       record, lease)


def _host_deletes(keys: Keys, host: str, uuid: str) -> list[Op]:
    return [Delete(key) for key in host_keys(keys, host, uuid)]


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
                 group: tuple[str, int] | None = None) -> Txn:
    """The transaction `schedule` commits (built first when its size must be checked)."""
    txn = Txn()
    for spec, host_name in placed:
        # Fresh uuid4s cannot collide; the compare still guards against a rerun.
        txn.compare.append(absent(keys.location(spec["uuid"])))
        txn.success += _placed(keys, spec, new_record(spec, SCHEDULED, host_name))
    if group is not None:
        txn.compare.append(none_created_since(keys.group(group[0]), group[1]))
    return txn


def unschedule(store: KeyValueStore,
               placed: list[tuple[str, str, str | None, int, int]]) -> int | None:
    """SCHEDULED -> as if never scheduled: take back instances nobody has acted on yet.

    `placed`: (host, uuid, group, record revision, spec revision) as read. One
    transaction removes each one's spec, record, location and group member, if no
    record or spec moved since (a host that began a build moved its record; then
    it must be destroyed through its host instead). A request across zones undoes
    what it wrote in one zone this way when another zone failed.
    """
    keys = store.keys
    txn = Txn()
    for host, uuid, group, record_revision, spec_revision in placed:
        txn.compare += [Compare(keys.record(host, uuid), "mod", "==", record_revision),
                        Compare(keys.spec(host, uuid), "mod", "==", spec_revision)]
        txn.success += [Delete(keys.record(host, uuid)), *_host_deletes(keys, host, uuid),
                        *(Delete(key) for key in operator_keys(keys, uuid, group))]
    return store.commit(txn)


def operations(count: int, grouped: bool) -> int:
    """Writes in `schedule`'s transaction for `count` instances (compares are fewer)."""
    return count * (4 if grouped else 3)


def begin_build(store: KeyValueStore, spec: dict[str, Any], spec_revision: int,
                read: RecordRead, host_name: str) -> int | None:
    """-> BUILDING on `spec["host"]`, if neither record nor spec moved since they were read."""
    keys, uuid, host = store.keys, spec["uuid"], spec["host"]
    building = (moved(read.record, BUILDING, host=host, host_name=host_name)
                if read.record else new_record(spec, BUILDING, host_name))
    return store.commit(Txn(
        [unchanged(keys.record(host, uuid), read.revision),
         Compare(keys.spec(host, uuid), "mod", "==", spec_revision)],
        [_record_put(keys, building)],
    ))


def activate(store: KeyValueStore, read: RecordRead, ip: str | None) -> int | None:
    """BUILDING -> ACTIVE with its IP (also on /booted/, as in the original toy)."""
    assert read.record is not None
    keys, record = store.keys, read.record
    success = [_record_put(keys, moved(record, ACTIVE, ip=ip, error=None))]
    if ip:
        # /booted/ holds the bare IP, the original toy's format, not a JSON message.
        success.append(Put(keys.booted(record["host"], record["uuid"]), ip))
    return store.commit(Txn([unchanged(keys.record(record["host"], record["uuid"]),
                                       read.revision)], success))


def host_down(keys: Keys, host: str) -> Compare:
    """Guards what the operator's side does to a dead host's instances: the host did not
    come back (its heartbeat key is still gone) when the transaction runs."""
    return absent(keys.alive(host))


def fail(store: KeyValueStore, spec: dict[str, Any], read: RecordRead, reason: str,
         guard: tuple[Compare, ...] = ()) -> int | None:
    """-> ERROR with `reason`; the host's other keys go. The caller freed the claim."""
    keys, uuid, host = store.keys, spec["uuid"], spec["host"]
    failed = (moved(read.record, ERROR, error=reason) if read.record
              else error_record(uuid, host, reason))
    return store.commit(Txn([unchanged(keys.record(host, uuid), read.revision), *guard],
                            [_record_put(keys, failed), *_host_deletes(keys, host, uuid)]))


def reject(store: KeyValueStore, rp_uuid: str, uuid: str, spec_revision: int,
           reason: str) -> int | None:
    """A spec nobody can act on: ERROR record with the reason, spec key dropped."""
    keys = store.keys
    spec_key = keys.spec(rp_uuid, uuid)
    return store.commit(Txn([Compare(spec_key, "mod", "==", spec_revision)],
                            [_record_put(keys, error_record(uuid, rp_uuid, reason)),
                             Delete(spec_key)]))


def drop_key(store: KeyValueStore, key: str, revision: int) -> int | None:
    """Remove a key that is not an instance's (if it did not change since it was read)."""
    return store.commit(Txn([Compare(key, "mod", "==", revision)], [Delete(key)]))


def hand_over(store: KeyValueStore, spec: dict[str, Any], read: RecordRead,
              reason: str) -> int | None:
    """-> RESCHEDULING: this host gives the instance up (its build failed, or a drain
    evacuated it) and the controller is asked to move it (a host may not write another
    host's keys). The claim and spec stay as they are."""
    assert read.record is not None
    keys = store.keys
    return store.commit(Txn([unchanged(keys.record(spec["host"], spec["uuid"]), read.revision)],
                            [_record_put(keys, moved(read.record, RESCHEDULING, error=reason))]))


def mark_deleting(store: KeyValueStore, spec: dict[str, Any], read: RecordRead) -> int | None:
    """-> DELETING (a destroy was asked for)."""
    keys = store.keys
    deleting = (moved(read.record, DELETING) if read.record
                else new_record(spec, DELETING))
    return store.commit(Txn([unchanged(keys.record(spec["host"], spec["uuid"]),
                                       read.revision)],
                            [_record_put(keys, deleting)]))


def delete(store: KeyValueStore, spec: dict[str, Any], read: RecordRead, ttl: int,
           guard: tuple[Compare, ...] = ()) -> int | None:
    """-> DELETED, a record that expires after `ttl` s; the host's other keys go."""
    keys = store.keys
    deleted = (moved(read.record, DELETED, ip=None) if read.record
               else new_record(spec, DELETED))
    lease = store.grant(ttl)
    return store.commit(Txn(list(guard), [_record_put(keys, deleted, lease),
                                          *_host_deletes(keys, spec["host"], spec["uuid"])]))


def finish_destroy_on_dead_host(store: KeyValueStore, spec: dict[str, Any], read: RecordRead,
                                ttl: int) -> int | None:
    """A destroy nobody will carry out (the host is down) -> DELETED, by the operator's
    side: only if the host is still down and the record is as it was read (the
    controller may have moved the instance meanwhile). The caller frees the claim after
    this succeeds, never before: a moved instance keeps its claim."""
    return delete(store, spec, read, ttl,
                  guard=(host_down(store.keys, spec["host"]),
                         unchanged(store.keys.record(spec["host"], spec["uuid"]),
                                   read.revision)))


def _spec_unchanged(keys: Keys, spec: dict[str, Any], revision: int | None) -> list[Compare]:
    """The spec as it was read (a destroy written meanwhile must not be moved away)."""
    if revision is None:
        return []
    return [Compare(keys.spec(spec["host"], spec["uuid"]), "mod", "==", revision)]


def move(store: KeyValueStore, spec: dict[str, Any], read: RecordRead, host: str,
         allocations: dict[str, Any], alternates: list[dict[str, Any]],
         spec_revision: int | None = None) -> int | None:
    """RESCHEDULING on spec's host -> SCHEDULED on `host` (the operator's side: it writes
    another host's keys). Spec, record, location and membership move in one transaction,
    if record and spec (at `spec_revision`) are as they were read; the caller moved the
    claim first (one Placement call)."""
    assert read.record is not None
    keys, uuid, old = store.keys, spec["uuid"], spec["host"]
    moved_spec = {**spec, "action": "build", "host": host, "allocations": allocations,
                  "alternates": alternates}
    record = moved(read.record, SCHEDULED, host=host, host_name=None, error=None)
    return store.commit(Txn(
        [unchanged(keys.record(old, uuid), read.revision),
         *_spec_unchanged(keys, spec, spec_revision)],
        [*_host_deletes(keys, old, uuid), Delete(keys.record(old, uuid)),
         *_placed(keys, moved_spec, record)],
    ))


def evacuate(store: KeyValueStore, spec: dict[str, Any], read: RecordRead, host: str,
             allocations: dict[str, Any], spec_revision: int | None = None) -> int | None:
    """An instance of a dead host -> SCHEDULED on `host`, to be built anew from its image
    (its disk was local: it is lost). Spec (a build), record, location and membership
    move in one transaction, only if the dead host has not come back and neither record
    nor spec (at `spec_revision`) changed since they were read. The caller moved the
    claim first."""
    assert read.record is not None
    keys, uuid, old = store.keys, spec["uuid"], spec["host"]
    rebuilt = {**spec, "action": "build", "host": host, "allocations": allocations,
               "alternates": []}
    record = moved(read.record, SCHEDULED, host=host, host_name=None, ip=None, error=None)
    return store.commit(Txn(
        [unchanged(keys.record(old, uuid), read.revision), host_down(keys, old),
         *_spec_unchanged(keys, spec, spec_revision)],
        [*_host_deletes(keys, old, uuid), Delete(keys.record(old, uuid)),
         *_placed(keys, rebuilt, record)],
    ))


def request_destroy(store: KeyValueStore, entry: Entry, spec: dict[str, Any]) -> int | None:
    """The operator's destroy: the host's spec rewritten with action destroy."""
    return store.commit(Txn([Compare(entry.key, "mod", "==", entry.mod_revision)],
                            [put_message(messages.INSTANCE_SPEC, entry.key,
                                         {**spec, "action": "destroy"})]))


def request_evacuate(store: KeyValueStore, entry: Entry, spec: dict[str, Any]) -> int | None:
    """A drain's request: the host's spec rewritten with action evacuate (give it up)."""
    return store.commit(Txn([Compare(entry.key, "mod", "==", entry.mod_revision)],
                            [put_message(messages.INSTANCE_SPEC, entry.key,
                                         {**spec, "action": "evacuate"})]))


def remove(store: KeyValueStore, uuid: str, host: str | None, group: str | None) -> int | None:
    """Forget an instance no host holds (ERROR, or its host is gone): every key it has."""
    keys = store.keys
    ops: list[Op] = [Delete(k) for k in operator_keys(keys, uuid, group)]
    if host:
        ops += [Delete(keys.record(host, uuid)), *_host_deletes(keys, host, uuid)]
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

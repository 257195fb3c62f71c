"""The instance: its states, its record, the keys it owns, and one transaction per transition.

Scheduler, compute daemon and CLI all move instances through this module, so
what a transition writes (and what it compares first) is decided in one place.

    SCHEDULED -> BUILDING -> ACTIVE -> DELETING -> DELETED (record expires)
        \\            |  \\-> SCHEDULED (rescheduled to an alternate host)
         \\           \\-> ERROR (allocation freed, nothing left) -> DELETING/removed
          \\-> ERROR / DELETING (a bad spec, a destroy before the build started)

Keys an instance owns (see `keys.py`): its record `/instances/<uuid>`, its
spec `/hosts/<rp>/<uuid>`, `/booted/<uuid>`, `/console/<uuid>` and, in a
server group, `/groups/<name>/<uuid>`. Every write compares the revision it
read, so an event delivered twice never moves an instance twice.
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
from etcd_compute.keys import Keys

LOG = logging.getLogger(__name__)

SCHEDULED = "SCHEDULED"
BUILDING = "BUILDING"
ACTIVE = "ACTIVE"
ERROR = "ERROR"
DELETING = "DELETING"
DELETED = "DELETED"

STATES = (SCHEDULED, BUILDING, ACTIVE, ERROR, DELETING, DELETED)
# States `schedule.py --wait` stops at (ACTIVE can still change: destroy).
FINAL = frozenset({ACTIVE, ERROR, DELETED})
# States in which a driver may hold the instance.
LIVE = frozenset({BUILDING, ACTIVE, DELETING})

# Allowed moves; None is "no record yet" (a spec written without one, or unreadable).
TRANSITIONS: dict[str | None, frozenset[str]] = {
    None: frozenset({SCHEDULED, BUILDING, ERROR, DELETING, DELETED}),
    SCHEDULED: frozenset({BUILDING, ERROR, DELETING, DELETED}),
    # BUILDING -> BUILDING: a spec for the same uuid arrived at another host.
    BUILDING: frozenset({BUILDING, ACTIVE, SCHEDULED, ERROR, DELETING, DELETED}),
    ACTIVE: frozenset({ERROR, DELETING, DELETED}),
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


def read_record(store: KeyValueStore, uuid: str) -> RecordRead:
    """The record of `uuid` and its revision; an unreadable one reads as absent (with a fault),
    at its real revision, so the next write replaces it."""
    entry = store.get(store.keys.instance(uuid))
    if entry is None:
        return RecordRead(None, 0)
    try:
        return RecordRead(messages.decode(messages.INSTANCE_RECORD, entry.value),
                          entry.mod_revision)
    except InvalidMessage as exc:
        return RecordRead(None, entry.mod_revision, str(exc))


def count_by_host(store: KeyValueStore) -> Counter[str]:
    """Instances per host, from the spec keys (one keys-only read)."""
    entries, _ = store.get_prefix(store.keys.hosts(), keys_only=True)
    counts: Counter[str] = Counter()
    for entry in entries:
        parsed = store.keys.parse_host_instance(entry.key)
        if parsed:
            counts[parsed[0]] += 1
    return counts


def find_spec(store: KeyValueStore, uuid: str, record: dict[str, Any] | None) -> Entry | None:
    """The spec key of `uuid`: under the record's host, else under any host."""
    if record and record.get("host"):
        entry = store.get(store.keys.host_instance(record["host"], uuid))
        if entry is not None:
            return entry
    entries, _ = store.get_prefix(store.keys.hosts(), keys_only=True)
    for entry in entries:
        if entry.key.endswith("/" + uuid):
            return store.get(entry.key)
    return None


# --- keys ----------------------------------------------------------------------------------


def owned_keys(keys: Keys, uuid: str, host: str | None, group: str | None) -> list[str]:
    """Every key the instance owns besides its record (one list, so no end state forgets one)."""
    owned = [keys.booted(uuid), keys.console(uuid)]
    if host:
        owned.insert(0, keys.host_instance(host, uuid))
    if group:
        owned.append(keys.group_member(group, uuid))
    return owned


def _spec_keys(keys: Keys, spec: dict[str, Any]) -> list[Op]:
    group = (spec.get("group") or {}).get("name")
    return [Delete(key) for key in owned_keys(keys, spec["uuid"], spec["host"], group)]


def _placed(keys: Keys, spec: dict[str, Any], record: dict[str, Any]) -> list[Op]:
    """Spec at its host, record, and group membership: what makes an instance live on a host."""
    uuid = spec["uuid"]
    ops: list[Op] = [
        put_message(messages.INSTANCE_SPEC, keys.host_instance(spec["host"], uuid), spec),
        put_message(messages.INSTANCE_RECORD, keys.instance(uuid), record),
    ]
    if spec.get("group"):
        ops.append(put_message(messages.GROUP_MEMBER,
                               keys.group_member(spec["group"]["name"], uuid),
                               {"host": spec["host"], "policy": spec["group"]["policy"]}))
    return ops


def _record_put(keys: Keys, record: dict[str, Any], lease: int | None = None) -> Op:
    return put_message(messages.INSTANCE_RECORD, keys.instance(record["uuid"]), record, lease)


# --- transitions: each one transaction -------------------------------------------------------


def schedule(store: KeyValueStore, placed: list[tuple[dict[str, Any], str | None]],
             group: tuple[str, int] | None = None) -> int | None:
    """New instances: (spec, host name) each -> spec, SCHEDULED record, group member.

    One transaction for the whole request. It compares that no record exists yet
    and, for a server group read at revision R, that no member was added since
    (`group` = (group name, R)). Returns its revision, or None if a compare failed.
    """
    return store.commit(schedule_txn(store.keys, placed, group))


def schedule_txn(keys: Keys, placed: list[tuple[dict[str, Any], str | None]],
                 group: tuple[str, int] | None = None) -> Txn:
    """The transaction `schedule` commits (built first when its size must be checked)."""
    txn = Txn()
    for spec, host_name in placed:
        # Fresh uuid4s cannot collide; the record compare still guards against a rerun.
        txn.compare.append(absent(keys.instance(spec["uuid"])))
        txn.success += _placed(keys, spec, new_record(spec, SCHEDULED, host_name))
    if group is not None:
        txn.compare.append(none_created_since(keys.group(group[0]), group[1]))
    return txn


def operations(count: int, grouped: bool) -> int:
    """Writes in `schedule`'s transaction for `count` instances (compares are fewer)."""
    return count * (3 if grouped else 2)


def begin_build(store: KeyValueStore, spec: dict[str, Any], spec_revision: int, read: RecordRead,
                host_name: str) -> int | None:
    """-> BUILDING on `spec["host"]`, if neither record nor spec moved since they were read."""
    keys = store.keys
    building = (moved(read.record, BUILDING, host=spec["host"], host_name=host_name)
                if read.record else new_record(spec, BUILDING, host_name))
    return store.commit(Txn(
        [unchanged(keys.instance(spec["uuid"]), read.revision),
         Compare(keys.host_instance(spec["host"], spec["uuid"]), "mod", "==", spec_revision)],
        [_record_put(keys, building)],
    ))


def activate(store: KeyValueStore, read: RecordRead, ip: str | None) -> int | None:
    """BUILDING -> ACTIVE with its IP (also on /booted/, as in the original toy)."""
    assert read.record is not None
    keys = store.keys
    uuid = read.record["uuid"]
    success = [_record_put(keys, moved(read.record, ACTIVE, ip=ip, error=None))]
    if ip:
        # /booted/ holds the bare IP, the original toy's format, not a JSON message.
        success.append(Put(keys.booted(uuid), ip))
    return store.commit(Txn([unchanged(keys.instance(uuid), read.revision)], success))


def fail(store: KeyValueStore, spec: dict[str, Any], read: RecordRead, reason: str) -> int | None:
    """-> ERROR with `reason`; every key but the record goes. The caller freed the claim."""
    keys = store.keys
    failed = (moved(read.record, ERROR, error=reason) if read.record
              else error_record(spec["uuid"], spec["host"], reason))
    return store.commit(Txn([unchanged(keys.instance(spec["uuid"]), read.revision)],
                            [_record_put(keys, failed), *_spec_keys(keys, spec)]))


def reject(store: KeyValueStore, rp_uuid: str, uuid: str, spec_revision: int,
           reason: str) -> int | None:
    """A spec nobody can act on: ERROR record with the reason, spec key dropped."""
    keys = store.keys
    host_key = keys.host_instance(rp_uuid, uuid)
    return store.commit(Txn([Compare(host_key, "mod", "==", spec_revision)],
                            [_record_put(keys, error_record(uuid, rp_uuid, reason)),
                             Delete(host_key)]))


def drop_key(store: KeyValueStore, key: str, revision: int) -> int | None:
    """Remove a key that is not an instance's (if it did not change since it was read)."""
    return store.commit(Txn([Compare(key, "mod", "==", revision)], [Delete(key)]))


def mark_deleting(store: KeyValueStore, spec: dict[str, Any], read: RecordRead) -> int | None:
    """-> DELETING (a destroy was asked for)."""
    keys = store.keys
    deleting = (moved(read.record, DELETING) if read.record
                else new_record(spec, DELETING))
    return store.commit(Txn([unchanged(keys.instance(spec["uuid"]), read.revision)],
                            [_record_put(keys, deleting)]))


def delete(store: KeyValueStore, spec: dict[str, Any], read: RecordRead, ttl: int) -> int | None:
    """-> DELETED, a record that expires after `ttl` s; every other key goes."""
    keys = store.keys
    deleted = (moved(read.record, DELETED, ip=None) if read.record
               else new_record(spec, DELETED))
    lease = store.grant(ttl)
    return store.commit(Txn([], [_record_put(keys, deleted, lease), *_spec_keys(keys, spec)]))


def move(store: KeyValueStore, spec: dict[str, Any], read: RecordRead, host: str,
         allocations: dict[str, Any], alternates: list[dict[str, Any]]) -> int | None:
    """BUILDING on spec's host -> SCHEDULED on `host`: spec, record and membership move together.

    The caller moved the claim first (one Placement call).
    """
    assert read.record is not None
    keys = store.keys
    moved_spec = {**spec, "host": host, "allocations": allocations, "alternates": alternates}
    record = moved(read.record, SCHEDULED, host=host, host_name=None)
    return store.commit(Txn(
        [unchanged(keys.instance(spec["uuid"]), read.revision)],
        [*_placed(keys, moved_spec, record),
         Delete(keys.host_instance(spec["host"], spec["uuid"]))],
    ))


def request_destroy(store: KeyValueStore, entry: Entry, spec: dict[str, Any]) -> int | None:
    """The operator's destroy: the host's spec rewritten with action destroy."""
    return store.commit(Txn([Compare(entry.key, "mod", "==", entry.mod_revision)],
                            [put_message(messages.INSTANCE_SPEC, entry.key,
                                         {**spec, "action": "destroy"})]))


def remove(store: KeyValueStore, uuid: str, record: dict[str, Any]) -> int | None:
    """Forget an instance no host holds (ERROR, or its host is gone): record and keys."""
    keys = store.keys
    owned = owned_keys(keys, uuid, None, record.get("group"))
    return store.commit(Txn([], [Delete(keys.instance(uuid)), *(Delete(k) for k in owned)]))

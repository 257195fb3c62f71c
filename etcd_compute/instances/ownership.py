"""The keys an instance owns, the operations that write them, and how they are let go.

On its host, the instance's spec, record, /booted/, /console/, /events/ and
/external-events/ keys, all under /hosts/<rp>/, which the host may write; on the operator's
side, its location `/instances/<uuid>` (which host holds it) and, in a
server group, `/groups/<name>/<uuid>`, which a host may not touch (see
`keys.py`). The operator's keys of an instance destroyed are bound to its
DELETED record's lease, so that they expire with it (`expire_with_record`: the
controller when it sees the record, `schedule.py destroy --wait`, a destroy
finished on a dead host); any left (the lease gone first) are removed by
whoever next reads them (`forget`): the CLI, the scheduler reading a group,
the controller.
"""

from __future__ import annotations

from typing import Any

from etcd_compute import events, messages
from etcd_compute.errors import InvalidMessage
from etcd_compute.etcd import Compare, Delete, KeyValueStore, Op, Txn, absent, put_message
from etcd_compute.instances.states import DELETED
from etcd_compute.keys import Keys


def host_keys(keys: Keys, host: str, uuid: str) -> list[str]:
    """The instance's keys on its host besides its record and events: what the host removes
    at the end (the events stay as long as the record), what other services told of it
    (`external_events.py`, written by the compute API) and the guest's password with them."""
    return [keys.spec(host, uuid), keys.booted(host, uuid), keys.console(host, uuid),
            keys.external_events(host, uuid), keys.password(host, uuid)]


def operator_keys(keys: Keys, uuid: str, group: str | None) -> list[str]:
    """The instance's keys only the operator's side writes: its location, group member and
    the compute API's view of it (`/servers/`, when the API made it)."""
    owned = [keys.location(uuid), keys.server(uuid)]
    if group:
        owned.append(keys.group_member(group, uuid))
    return owned


def placed_ops(keys: Keys, spec: dict[str, Any], record: dict[str, Any],
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


def record_put(keys: Keys, record: dict[str, Any], lease: int | None = None) -> Op:
    return put_message(messages.INSTANCE_RECORD, keys.record(record["host"], record["uuid"]),
                       record, lease)


def host_deletes(keys: Keys, host: str, uuid: str) -> list[Op]:
    return [Delete(key) for key in host_keys(keys, host, uuid)]


def spec_put(keys: Keys, spec: dict[str, Any]) -> Op:
    return put_message(messages.INSTANCE_SPEC, keys.spec(spec["host"], spec["uuid"]), spec)


def drop_key(store: KeyValueStore, key: str, revision: int) -> int | None:
    """Remove a key that is not an instance's (if it did not change since it was read)."""
    return store.commit(Txn([Compare(key, "mod", "==", revision)], [Delete(key)]))


def remove(store: KeyValueStore, uuid: str, host: str | None, group: str | None) -> int | None:
    """Forget an instance no host holds (ERROR, or its host is gone): every key it has."""
    keys = store.keys
    ops: list[Op] = [Delete(k) for k in operator_keys(keys, uuid, group)]
    if host:
        ops += [Delete(keys.record(host, uuid)), Delete(keys.events(host, uuid)),
                *host_deletes(keys, host, uuid)]
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


def expire_with_record(store: KeyValueStore, uuid: str) -> int | None:
    """Bind the operator's keys (location, group member) of an instance whose record is
    DELETED to the record's lease: all its keys then expire together (a host may not
    touch the operator's keys; the operator's side may). Compared with what was read: a
    record or location that changed meanwhile is left as it is. None if nothing was done
    (not DELETED, already bound, or gone: `forget` removes what is left)."""
    keys = store.keys
    location_entry = store.get(keys.location(uuid))
    if location_entry is None:
        return None
    try:
        location = messages.decode(messages.INSTANCE_LOCATION, location_entry.value)
        record_entry = store.get(keys.record(location["host"], uuid))
        record = messages.decode(messages.INSTANCE_RECORD, record_entry.value) \
            if record_entry is not None else None
    except InvalidMessage:
        return None
    if record is None or record["state"] != DELETED or record_entry is None or \
            not record_entry.lease or location_entry.lease == record_entry.lease:
        return None
    lease = record_entry.lease
    compare = [Compare(record_entry.key, "mod", "==", record_entry.mod_revision),
               Compare(location_entry.key, "mod", "==", location_entry.mod_revision)]
    success: list[Op] = [put_message(messages.INSTANCE_LOCATION, location_entry.key, location,
                                     lease)]
    if location.get("group"):
        member_entry = store.get(keys.group_member(location["group"], uuid))
        if member_entry is not None:
            try:
                member = messages.decode(messages.GROUP_MEMBER, member_entry.value)
            except InvalidMessage:
                member = None
            compare.append(Compare(member_entry.key, "mod", "==", member_entry.mod_revision))
            success.append(put_message(messages.GROUP_MEMBER, member_entry.key, member, lease)
                           if member is not None else Delete(member_entry.key))
    return store.commit(Txn(compare, success))

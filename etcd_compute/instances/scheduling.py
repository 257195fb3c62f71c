"""What the scheduler writes: new instances placed, and taken back before anyone acted.

One transaction per request: each instance's spec, SCHEDULED record,
location and group member (`schedule`), compared so that a rerun or a group
that grew since it was read writes nothing; `unschedule` takes them back
while no host has moved them (a request across zones that failed elsewhere).
"""

from __future__ import annotations

from typing import Any

from etcd_compute import messages
from etcd_compute.etcd import (
    Compare,
    Delete,
    KeyValueStore,
    Txn,
    absent,
    none_created_since,
    put_message,
)
from etcd_compute.instances.ownership import host_deletes, operator_keys, placed_ops
from etcd_compute.instances.records import new_record
from etcd_compute.instances.states import SCHEDULED
from etcd_compute.keys import Keys


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
        txn.success += placed_ops(keys, spec, new_record(spec, SCHEDULED, host_name))
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
                        *host_deletes(keys, host, uuid),
                        *(Delete(key) for key in operator_keys(keys, uuid, group))]
    return txn


def operations(count: int, grouped: bool, served: bool = False) -> int:
    """Writes in `schedule`'s transaction for `count` instances (compares are fewer);
    `served`: with the compute API's view of each."""
    return count * (3 + grouped + served)

"""Tell the chosen hosts: specs, SCHEDULED records and group members in one etcd transaction.

The transaction compares that the records do not exist yet and, for a server
group, that no member was added since we read the group: a concurrent
scheduler that put another anti-affinity member on the same host makes our
write fail, and the caller frees the claim and plans again.
"""

from __future__ import annotations

import time
from typing import Any

import pyetcd.transactions

from etcd_compute import messages
from etcd_compute.compute import records
from etcd_compute.etcd import Store
from etcd_compute.scheduler.spec import Destination, RequestSpec


def prefix_end(prefix: str) -> str:
    """The first key after every key starting with `prefix` (etcd's range_end)."""
    return prefix[:-1] + chr(ord(prefix[-1]) + 1)


def instance_spec(destination: Destination, request_spec: RequestSpec,
                  settings: dict[str, Any], requested_at: float) -> dict[str, Any]:
    group = request_spec.group
    return {
        "action": "build",
        "uuid": destination.uuid,
        "name": destination.name,
        "host": destination.host,
        "resources": request_spec.request.resources,
        "allocations": destination.allocations,
        "image": {"url": request_spec.image_url or settings["default_image"], "sha256": None},
        "user_data": request_spec.user_data,
        "ssh_key": request_spec.ssh_key,
        "project_id": settings["project_id"],
        "user_id": settings["user_id"],
        "group": {"name": group[0], "policy": group[1]} if group else None,
        "alternates": destination.alternates,
        "requested_at": requested_at,
    }


def operations(count: int, grouped: bool) -> int:
    """Puts in the transaction for `count` instances (compares are fewer)."""
    return count * (3 if grouped else 2)


def write_specs(store: Store, destinations: list[Destination], request_spec: RequestSpec,
                settings: dict[str, Any], group_revision: int | None) -> int | None:
    """One transaction for the whole request: its revision, or None if a compare failed."""
    keys, now = store.keys, time.time()
    compare, success = [], []
    for destination in destinations:
        spec = instance_spec(destination, request_spec, settings, now)
        host_key = keys.host_instance(destination.host, destination.uuid)
        record_key = keys.instance(destination.uuid)
        # Fresh uuid4s cannot collide; the record compare still guards against a rerun.
        compare.append(store.absent(record_key))
        success += [
            store.put_op(messages.INSTANCE_SPEC, host_key, spec),
            store.put_op(messages.INSTANCE_RECORD, record_key,
                         records.from_spec(spec, records.SCHEDULED, destination.host_name)),
        ]
        if request_spec.group:
            name, policy = request_spec.group
            member_key = keys.group_member(name, destination.uuid)
            success.append(store.put_op(messages.GROUP_MEMBER, member_key,
                                        {"host": destination.host, "policy": policy}))
    if request_spec.group and group_revision is not None:
        group_prefix = keys.group(request_spec.group[0])
        # Every member key must predate our read of the group (an empty range passes).
        compare.append(pyetcd.transactions.Create(group_prefix, prefix_end(group_prefix))
                       < group_revision + 1)
    return store.transaction(compare, success)

"""Write the chosen hosts' specs: one spec, SCHEDULED record and group member per instance,
all in one etcd transaction (the instance model's `schedule`).

For a server group the transaction also compares that no member was added
since we read the group: a concurrent scheduler that put another
anti-affinity member on the same host makes our write fail, and the caller
frees the claim and plans again.
"""

from __future__ import annotations

import time
import uuid as uuidlib
from typing import Any

from etcd_compute.errors import UsageError
from etcd_compute.etcd import KeyValueStore, Txn
from etcd_compute.instances import scheduling
from etcd_compute.keys import Keys
from etcd_compute.scheduler.planner import Pick
from etcd_compute.scheduler.spec import Destination, RequestSpec, server_view


def destinations(request_spec: RequestSpec, picks: list[Pick],
                 first: int = 0) -> list[Destination]:
    """A new instance (uuid, name) per pick; `first`: the index of the first one in the
    whole request (names NAME-<index+1>)."""
    found = []
    for index, pick in enumerate(picks, start=first):
        instance = request_spec.uuids[index] if request_spec.uuids else str(uuidlib.uuid4())
        found.append(Destination(
            uuid=instance,
            name=request_spec.instance_name(index, instance),
            host=pick.host.uuid,
            host_name=pick.host.name,
            allocations=pick.allocations,
            alternates=[{"host": host.uuid, "allocations": allocations}
                        for host, allocations in pick.alternates],
        ))
    return found


def instance_spec(destination: Destination, request_spec: RequestSpec,
                  settings: dict[str, Any], requested_at: float,
                  requested_by: str | None = None) -> dict[str, Any]:
    """The instance_spec message a host receives for `destination`."""
    project_id, user_id = request_spec.owner(settings)
    return {
        "action": "build",
        "uuid": destination.uuid,
        "name": destination.name,
        "host": destination.host,
        "resources": request_spec.request.resources,
        "allocations": destination.allocations,
        "image": request_spec.image(settings["default_image"]),
        "user_data": request_spec.user_data,
        "ssh_key": request_spec.ssh_key,
        **({} if request_spec.network else {"network": False}),
        **({} if request_spec.networks is None else {"networks": request_spec.networks}),
        **({} if request_spec.security_groups is None
           else {"security_groups": request_spec.security_groups}),
        "project_id": project_id,
        "user_id": user_id,
        "group": request_spec.group_message(),
        "alternates": destination.alternates,
        "requested_at": requested_at,
        "requested_by": requested_by,
        # The compute API request's id (its server template's), for the create's event.
        **({"request_id": request_spec.server["request_id"]}
           if (request_spec.server or {}).get("request_id") else {}),
        # Kept so that the controller can place it again the same way (host failure).
        "query": request_spec.request.to_query(),
        "on_host_failure": request_spec.on_host_failure or settings["on_host_failure"],
    }


def transaction(keys: Keys, destinations: list[Destination], request_spec: RequestSpec,
                settings: dict[str, Any], group_revision: int | None,
                requested_by: str | None = None, first: int = 0) -> Txn:
    """The one transaction that writes the whole request (see
    `instances.scheduling.schedule_txn`);
    `requested_by`: who asked, if not this process's operator (the scheduler service);
    `first`: the index of the first destination in the whole request."""
    now, who = time.time(), requested_by or request_spec.requester()
    placed = [(instance_spec(d, request_spec, settings, now, who), d.host_name)
              for d in destinations]
    group = None
    if request_spec.group and group_revision is not None:
        group = (request_spec.group[0], group_revision)
    servers = None
    if request_spec.server is not None:
        servers = [server_view(request_spec.server, d, first + index, request_spec.count, now)
                   for index, d in enumerate(destinations)]
    return scheduling.schedule_txn(keys, placed, group, servers)


def write_specs(store: KeyValueStore, destinations: list[Destination],
                request_spec: RequestSpec, settings: dict[str, Any],
                group_revision: int | None) -> int | None:
    """Write the request: its revision, or None if a compare failed."""
    return store.commit(transaction(store.keys, destinations, request_spec, settings,
                                    group_revision))


def check_txn_ops(request_spec: RequestSpec, settings: dict[str, Any]) -> None:
    """UsageError, before anything is asked, when one transaction could not write the request."""
    needed = scheduling.operations(request_spec.count, request_spec.group is not None,
                                   request_spec.server is not None)
    if needed > settings["etcd_max_txn_ops"]:
        raise UsageError(
            f"--count {request_spec.count} needs {needed} etcd operations in one "
            f"transaction; etcd allows {settings['etcd_max_txn_ops']} "
            "(raise etcd's --max-txn-ops and scheduler.etcd_max_txn_ops together)")

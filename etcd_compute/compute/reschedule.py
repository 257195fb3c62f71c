"""Hand a failed build to the next live alternate host the scheduler kept in its spec.

Uses the same two steps as the scheduler: the claim moves in one Placement
call (`claims.move`: we never hold neither host, nor both), then spec,
record and group membership move in one etcd transaction (`instances.move`).
"""

from __future__ import annotations

import logging
from typing import Any

from etcd_compute import claims, instances
from etcd_compute.errors import EtcdComputeError
from etcd_compute.etcd import KeyValueStore
from etcd_compute.placement import PlacementClient


def reschedule(store: KeyValueStore, placement: PlacementClient, spec: dict[str, Any],
               log: logging.LoggerAdapter) -> str | None:
    """The alternate host the instance now belongs to, or None if none would take it."""
    uuid = spec["uuid"]
    if "project_id" not in spec or "user_id" not in spec:
        return None
    read = instances.read_record(store, spec["host"], uuid)
    if read.state != instances.BUILDING:
        return None
    alternates = spec.get("alternates") or []
    for index, alternate in enumerate(alternates):
        host = alternate["host"]
        if store.get(store.keys.alive(host)) is None:
            log.info("alternate %s has no heartbeat; skipping it", host)
            continue
        try:
            claims.move(placement, uuid, alternate["allocations"], spec["project_id"],
                        spec["user_id"])
        except EtcdComputeError as exc:
            log.info("alternate %s refused the claim (%s); trying the next", host, exc)
            continue
        if instances.move(store, spec, read, host, alternate["allocations"],
                          alternates[index + 1:]) is None:
            return None  # a destroy got in; the ERROR path frees the claim
        return host
    return None

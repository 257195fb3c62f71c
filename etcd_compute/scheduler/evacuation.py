"""Where the instances of a dead host go now: one plan for all of them.

Recovering N instances one at a time asked Placement N times for the same
candidates and planned each as if the others did not exist. `place_many`
asks once per request shape (the instance's query, sized for that shape's
instances), reads etcd's view of the hosts once, and plans every instance on
one shared ProviderUsage (what one takes, the next sees, whatever its shape),
as the scheduler service plans a batch. Each instance keeps its own filters,
weighers and server group (the members' hosts, those planned here included).
Nothing is claimed: the controller moves the claims and the records.
"""

from __future__ import annotations

import time
from collections import Counter
from typing import Any

from etcd_compute.errors import NoValidHost, PlacementError
from etcd_compute.instances import records
from etcd_compute.scheduler import explain
from etcd_compute.scheduler.candidates import extra_params
from etcd_compute.scheduler.context import PlanContext
from etcd_compute.scheduler.hoststate import Cluster, ProviderUsage, host_states
from etcd_compute.scheduler.planner import NoRoom, Pick, Planner
from etcd_compute.scheduler.scheduler import Scheduler
from etcd_compute.scheduler.spec import RequestSpec, for_instance


def place_many(scheduler: Scheduler, specs: list[dict[str, Any]],
               exclude: frozenset[str]) -> dict[str, Pick | NoValidHost]:
    """Where each instance (by its spec's uuid) would go now, `exclude`d hosts aside; a
    NoValidHost (with the reasons) for those that fit nowhere."""
    settings = scheduler.settings
    requests = {spec["uuid"]: for_instance(spec) for spec in specs}
    shapes: dict[str, list[str]] = {}
    for uuid, request_spec in requests.items():
        shapes.setdefault(request_spec.request.to_query(), []).append(uuid)
    cluster = Cluster.read(scheduler.store, cache=scheduler._decoded,
                           max_ops=settings["etcd_max_txn_ops"])
    usage = ProviderUsage({})
    planners: dict[str, Planner] = {}
    for shape, uuids in shapes.items():
        planners[shape] = Planner(
            _hosts(scheduler, requests[uuids[0]], len(uuids), cluster, usage, exclude),
            scheduler.filters, scheduler.weighers, settings["host_subset_size"],
            settings["max_attempts"], scheduler.rng)
    groups: dict[str, PlanContext] = {}
    placed: dict[str, Pick | NoValidHost] = {}
    for uuid, request_spec in requests.items():
        shape = request_spec.request.to_query()
        try:
            (pick,) = planners[shape].place(1, _context(scheduler, request_spec, groups))
        except NoRoom as exc:
            placed[uuid] = NoValidHost(scheduler.explain(request_spec, exc.report))
            continue
        for other, planner in planners.items():
            if other != shape:
                planner.placed_elsewhere(pick.host.uuid, pick.allocations)
        placed[uuid] = pick
    return placed


def _hosts(scheduler: Scheduler, request_spec: RequestSpec, count: int, cluster: Cluster,
           usage: ProviderUsage, exclude: frozenset[str]) -> list[Any]:
    """The candidate hosts of one shape (one Placement query for its `count` instances)."""
    query = request_spec.request.to_query(limit=scheduler.settings["candidate_limit"] + count,
                                          extra=extra_params(scheduler.host_traits))
    asked_at = time.monotonic()
    try:
        candidates = scheduler.placement.allocation_candidates(query)
    except PlacementError as exc:
        if not explain.unknown_trait(exc):
            raise
        return []
    return [host for host in host_states(candidates, cluster, usage, asked_at)
            if host.uuid not in exclude]


def _context(scheduler: Scheduler, request_spec: RequestSpec,
             groups: dict[str, PlanContext]) -> PlanContext:
    """The instance's context: one per server group, shared by the instances of the group
    planned here (each pick counts for the next)."""
    limit = scheduler.settings["max_instances_per_host"]
    if request_spec.group is None:
        return PlanContext(max_instances_per_host=limit)
    name, policy = request_spec.group
    if name not in groups:
        members, _ = records.group_members(scheduler.store, name)
        groups[name] = PlanContext(policy=policy, max_instances_per_host=limit,
                                   group_max=request_spec.group_max or 1,
                                   group_hosts=Counter(m["host"] for m in members.values()))
    return groups[name]

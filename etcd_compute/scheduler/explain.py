"""Explain "no valid host": one line per reason, after NO ALLOCATIONS LEFT.

When Placement offers nothing we ask it smaller questions, each one GET:
- the resources alone (no traits, aggregates, trees): if that is empty, one
  `resources=RC:1` query per class shows every provider's capacity and use
  in provider_summaries, so we can name the class and the largest free amount;
- the resources plus one constraint at a time: a constraint that empties the
  answer on its own is named as the one that excludes every provider.
When Placement offered hosts but our filters removed them, the planner's
FilterReport says how many hosts each filter removed.
"""

from __future__ import annotations

import dataclasses

from etcd_compute.errors import PlacementError
from etcd_compute.keys import UUID
from etcd_compute.placement import PlacementClient
from etcd_compute.scheduler.planner import FilterReport
from etcd_compute.scheduler.request import ResourceRequest


def unknown_trait(exc: PlacementError) -> bool:
    """Placement answers 400 "No such trait(s)" for a trait nobody ever created."""
    return exc.status == 400 and "No such trait" in str(exc)


def _has_candidates(placement: PlacementClient, query: str) -> bool:
    try:
        return bool(placement.allocation_candidates(query)["allocation_requests"])
    except PlacementError as exc:
        if unknown_trait(exc):
            return False
        raise


def _largest_free(placement: PlacementClient, rc: str) -> tuple[int, int] | None:
    """(largest free amount of `rc` on any provider, providers with some free), or None."""
    answer = placement.allocation_candidates(f"resources={rc}:1")
    free = [int(s["resources"][rc]["capacity"]) - int(s["resources"][rc]["used"])
            for s in answer["provider_summaries"].values() if rc in s["resources"]]
    return (max(free), len(free)) if free else None


def _describe(key: str, value: str) -> str:
    """What a constraint asks, in words, for "<...> excludes every provider"."""
    if key == "root_required":
        return f"{key}={value}: no host with enough free resources has trait {value} " \
               "(the scheduler's network.backend: no compute of that backend has room)"
    if key.startswith("required"):
        if value.startswith("in:"):
            return f"{key}={value}: no provider with enough free resources has any of " \
                   f"{value[3:].replace(',', ', ')}"
        if value.startswith("!"):
            return f"{key}={value}: every provider with enough free resources has trait " \
                   f"{value[1:]}"
        return f"{key}={value}: no provider with enough free resources has trait {value}"
    if key.startswith("member_of"):
        if value.startswith("!"):
            return f"{key}={value}: every provider with enough free resources is in " \
                   f"aggregate {value.lstrip('!').removeprefix('in:')}"
        aggregates = value.removeprefix("in:").replace(",", ", ")
        return f"{key}={value}: no provider with enough free resources is in " \
               f"aggregate {aggregates}"
    return f"{key}={value}: no provider with enough free resources is in the tree of {value}"


def resource_reasons(placement: PlacementClient, request: ResourceRequest) -> list[str]:
    reasons = []
    for group in request.groups.values():
        for rc, amount in sorted(group.resources.items()):
            seen = _largest_free(placement, rc)
            label = f"resources{group.suffix}={rc}:{amount}"
            if seen is None:
                reasons.append(f"{label}: no resource provider has any {rc} free "
                               "(none has inventory of it, or all of it is used)")
            elif seen[0] < amount:
                reasons.append(f"{label}: no resource provider has {amount} {rc} free "
                               f"(largest free: {seen[0]}, on {seen[1]} provider(s) with some)")
    if not reasons:
        wanted = ", ".join(f"{rc}:{n}" for rc, n in sorted(request.resources.items()))
        reasons.append(f"no resource provider has {wanted} free together (each class fits "
                       "somewhere on its own; or max_unit/step_size/group_policy forbid it)")
    return reasons


def placement_reasons(placement: PlacementClient, request: ResourceRequest,
                      extra: list[tuple[str, str]] | None = None) -> list[str]:
    """Why Placement returned no allocation candidates for `request` (with the scheduler's
    `extra` constraints: the traits every host must have)."""
    if not _has_candidates(placement, request.to_query(limit=1, constraints=[])):
        return resource_reasons(placement, request)
    constraints = request.constraint_params() + (extra or [])
    reasons = [_describe(key, value) for key, value in constraints
               if not _has_candidates(placement, request.to_query(limit=1,
                                                                   constraints=[(key, value)]))]
    if not reasons:
        shown = "&".join(f"{k}={v}" for k, v in constraints)
        reasons.append(f"{shown}: each constraint alone leaves a provider with enough free "
                       "resources, but together they exclude every one")
    return reasons


# How many hosts a filter's line names before "+N more".
NAMED_HOSTS = 5


def filter_reasons(report: FilterReport, limit_reached: bool) -> list[str]:
    reasons = []
    if report.count > 1:
        reasons.append(f"room for only {report.placed} of the {report.count} instances "
                       "requested; nothing was claimed")
    if report.filled_by_request:
        reasons.append(f"{report.filled_by_request} of {report.candidates} candidate host(s) "
                       "would be full with the earlier instances of this request")
    for name, reason, removed in report.removed:
        if removed:
            named = report.removed_names.get(name, [])
            shown = ", ".join(named[:NAMED_HOSTS]) + (
                f", +{len(named) - NAMED_HOSTS} more" if len(named) > NAMED_HOSTS else "")
            reasons.append(f"{name} removed {removed} host(s): {reason}"
                           + (f" [{shown}]" if shown else ""))
    if limit_reached:
        reasons.append(f"only {report.candidates} candidate host(s) considered "
                       "(scheduler.candidate_limit); raise it to consider more")
    return reasons


def explain(placement: PlacementClient, request: ResourceRequest,
            report: FilterReport | None, limit_reached: bool = False,
            extra: list[tuple[str, str]] | None = None) -> list[str]:
    """The reasons, one line each (NO ALLOCATIONS LEFT itself is the error's message)."""
    if report is None:
        return placement_reasons(placement, request, extra)
    return filter_reasons(_with_provider_names(placement, report), limit_reached)


def _with_provider_names(placement: PlacementClient, report: FilterReport) -> FilterReport:
    """A host without a heartbeat is known only by its provider uuid: name it from
    Placement (a few lookups, on this rare path only)."""
    names: dict[str, list[str]] = {}
    for name, hosts in report.removed_names.items():
        named = []
        for host in hosts[:NAMED_HOSTS]:
            provider = placement.get_provider(host) if UUID.match(host) else None
            named.append(provider["name"] if provider else host)
        names[name] = sorted(named) + hosts[NAMED_HOSTS:]
    return dataclasses.replace(report, removed_names=names)


"""The estimator: how many of a request one zone can take, and how good each place is.

Karmada asks each member cluster "how many replicas of this fit?"; the 2011
document had each child zone return its weighted list. A zone does both at
once: it plans the request on its own hosts exactly as a request made there
(candidates from its Placement, its etcd's view of the hosts, the filters
and weighers, virtual depletion), one instance after another until nothing
more fits or all are placed. Each pick comes with its host's raw weigher
values after placing it, so that the parent can compare picks of different
zones on one scale (`merge.py`). Nothing is claimed.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from etcd_compute.scheduler import RequestSpec, Scheduler
from etcd_compute.scheduler.planner import FilterReport, NoRoom, Pick, plan


@dataclass
class Estimate:
    """What one zone can take of a request, best first."""

    picks: list[Pick]
    # Per pick: each weigher's raw value for its host once the instance is on it.
    raw: list[tuple[float, ...]]
    group_revision: int | None
    # Live members of the request's server group in this zone (before this request).
    group_members: int
    # Why no more fit (None: all did, or Placement offered nothing: `offered` is 0).
    report: FilterReport | None
    offered: int
    limited: bool

    @property
    def fit(self) -> int:
        return len(self.picks)


def estimate(scheduler: Scheduler, request_spec: RequestSpec) -> Estimate:
    """Plan as many of `request_spec.count` instances as fit in the scheduler's zone."""
    found = scheduler.candidates(request_spec)
    settings = scheduler.settings
    members = sum(found.context.group_hosts.values())
    picks: list[Pick] = []
    raw: list[tuple[float, ...]] = []
    report = None
    for placed in range(request_spec.count if found.offered else 0):
        try:
            # One at a time (the planner's own loop, step by step): stop where it stops.
            (pick,) = plan(found.hosts, 1, scheduler.filters, scheduler.weighers,
                           found.context, settings["host_subset_size"],
                           settings["max_attempts"], scheduler.rng)
        except NoRoom as exc:
            # count 1: the request's total is said once, across zones (federation.py).
            report = dataclasses.replace(exc.report, count=1, placed=placed)
            break
        picks.append(pick)
        raw.append(tuple(weigher.raw_weight(pick.host, found.context)
                         for weigher, _ in scheduler.weighers))
    return Estimate(picks, raw, found.group_revision, members, report, found.offered,
                    found.limited)


def reasons(scheduler: Scheduler, request_spec: RequestSpec, found: Estimate) -> list[str]:
    """Why the zone cannot take more (asks its Placement; only on the failure path)."""
    if not found.offered:
        return scheduler.explain(request_spec, None)
    if found.report is not None:
        return scheduler.explain(request_spec, found.report, found.limited)
    return []

"""Filter, weigh, pick: place `count` instances on the candidate hosts, in memory.

Nova's distributed-scheduler loop: for each instance, keep the hosts that
still fit (after virtual depletion by the instances placed before it) and
pass every filter, weigh them, and pick at random among the best
`host_subset_size` so that concurrent schedulers rarely pick the same host.
Nothing is claimed here; `claims.py` does that for the whole plan at once.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field

from etcd_compute.scheduler.context import PlanContext
from etcd_compute.scheduler.filters import HostFilter
from etcd_compute.scheduler.hoststate import Allocations, HostState
from etcd_compute.scheduler.weighers import HostWeigher, weigh


@dataclass
class Pick:
    host: HostState
    allocations: Allocations
    alternates: list[tuple[HostState, Allocations]]


@dataclass
class FilterReport:
    """Why the plan stopped: for the "no valid host" explanation."""

    count: int
    placed: int
    candidates: int
    # Hosts Placement offered that no longer fit after earlier picks of this request.
    filled_by_request: int
    removed: list[tuple[str, str, int]]  # (filter name, reason, hosts removed)
    # The names of the hosts each filter removed (a down or disabled host is named).
    removed_names: dict[str, list[str]] = field(default_factory=dict)


class NoRoom(Exception):
    def __init__(self, report: FilterReport):
        super().__init__(f"room for {report.placed} of {report.count}")
        self.report = report


def plan(hosts: list[HostState], count: int, filters: list[HostFilter],
         weighers: list[tuple[HostWeigher, float]], context: PlanContext,
         host_subset_size: int = 1, max_attempts: int = 1,
         rng: random.Random | None = None) -> list[Pick]:
    """One Pick per instance, or NoRoom (with a FilterReport) if they do not all fit."""
    rng = rng or random.Random()
    picks: list[Pick] = []
    for placed in range(count):
        fitting = [host for host in hosts if host.fitting_option() is not None]
        remaining, removed, names = fitting, [], {}
        for host_filter in filters:
            kept = [host for host in remaining if host_filter.host_passes(host, context)]
            name = type(host_filter).__name__
            removed.append((name, host_filter.reason, len(remaining) - len(kept)))
            names[name] = sorted(host.name for host in remaining if host not in kept)
            remaining = kept
        if not remaining:
            raise NoRoom(FilterReport(count, placed, len(hosts), len(hosts) - len(fitting),
                                      removed, names))
        weighed = [host for _, host in weigh(remaining, weighers, context)]
        chosen = rng.choice(weighed[:host_subset_size])
        allocations = chosen.fitting_option()
        assert allocations is not None
        chosen.usage.consume(allocations)
        chosen.instances += 1
        if context.policy:
            context.group_hosts[chosen.uuid] += 1
        alternates = []
        for host in weighed:
            option = host.fitting_option() if host is not chosen else None
            if option is not None and len(alternates) < max_attempts - 1:
                alternates.append((host, option))
        picks.append(Pick(chosen, allocations, alternates))
    return picks

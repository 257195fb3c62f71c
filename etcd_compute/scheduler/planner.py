"""Filter, weigh, pick: place `count` instances on the candidate hosts, in memory.

Nova's distributed-scheduler loop: for each instance, keep the hosts that
still fit (after virtual depletion by the instances placed before it) and
pass every filter, weigh them, and pick at random among the best
`host_subset_size` so that concurrent schedulers rarely pick the same host.
Nothing is claimed here; `claims.py` does that for the whole plan at once.

A `Planner` keeps, per host, whether it fits, which filter (if any) removes it
and its raw weights, and after each pick works out again only the hosts the
pick changed: the chosen host and any host sharing a provider with it (with a
server-group policy, where every host's verdict may depend on the group, all
of them). Normalizing the weights over the hosts left is the only per-pick
pass over every host. The scheduler service plans many requests on one
Planner per request shape, so what one request took, the next one sees.
"""

from __future__ import annotations

import heapq
import random
from collections.abc import Iterable
from dataclasses import dataclass, field

from etcd_compute.scheduler.context import PlanContext
from etcd_compute.scheduler.filters import HostFilter
from etcd_compute.scheduler.hoststate import Allocations, HostState
from etcd_compute.scheduler.weighers import HostWeigher

# How many hosts past host_subset_size + alternates the partial sort looks at first
# (a host sharing a provider with the chosen one may stop fitting).
ORDER_MARGIN = 8


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


@dataclass
class _Row:
    """What the planner knows of one host until a pick changes it."""

    option: Allocations | None = None
    rejected_by: int | None = None  # index of the first filter that removes it
    raw: tuple[float, ...] = ()


class Planner:
    """Picks on one list of candidate hosts, across any number of `place` calls."""

    def __init__(self, hosts: list[HostState], filters: list[HostFilter],
                 weighers: list[tuple[HostWeigher, float]], host_subset_size: int = 1,
                 max_attempts: int = 1, rng: random.Random | None = None):
        self.hosts = hosts
        self.filters = filters
        self.weighers = weighers
        self.host_subset_size = max(1, host_subset_size)
        self.max_attempts = max(1, max_attempts)
        self.rng = rng or random.Random()
        self._rows = [_Row() for _ in hosts]
        self._dirty: set[int] = set(range(len(hosts)))
        self._context: PlanContext | None = None
        # Which hosts a provider's capacity matters to (their options and their tree).
        self._by_provider: dict[str, set[int]] = {}
        self._by_host: dict[str, int] = {}
        for index, host in enumerate(hosts):
            self._by_host[host.uuid] = index
            providers = set(host.tree or {host.uuid})
            for option in host.options:
                providers.update(option)
            for rp in providers:
                self._by_provider.setdefault(rp, set()).add(index)

    # --- what changed ---------------------------------------------------------------------

    def touched(self, allocations: Allocations, host: str | None = None) -> None:
        """Capacity of these providers changed (or `host` took an instance) elsewhere."""
        for rp in allocations:
            self._dirty.update(self._by_provider.get(rp, ()))
        if host is not None and host in self._by_host:
            self._dirty.add(self._by_host[host])

    def placed_elsewhere(self, host: str, allocations: Allocations) -> None:
        """Another planner (another request shape) put an instance on `host`; the capacity
        is shared (one ProviderUsage), the host's instance count is ours to update."""
        index = self._by_host.get(host)
        if index is not None:
            self.hosts[index].instances += 1
        self.touched(allocations, host)

    def _use(self, context: PlanContext) -> None:
        previous, self._context = self._context, context
        if previous is None or previous is context:
            return
        # Rows depend on the context only through a group policy and the limits.
        if previous.policy or context.policy or \
                previous.max_instances_per_host != context.max_instances_per_host:
            self._dirty = set(range(len(self.hosts)))

    def _refresh(self, context: PlanContext) -> None:
        for index in self._dirty:
            host, row = self.hosts[index], self._rows[index]
            row.option = host.fitting_option()
            row.rejected_by = None
            if row.option is None:
                continue
            for position, host_filter in enumerate(self.filters):
                if not host_filter.host_passes(host, context):
                    row.rejected_by = position
                    break
            if row.rejected_by is None:
                row.raw = tuple(weigher.raw_weight(host, context)
                                for weigher, _ in self.weighers)
        self._dirty = set()

    # --- picking --------------------------------------------------------------------------

    def place(self, count: int, context: PlanContext) -> list[Pick]:
        """One Pick per instance, or NoRoom (with a FilterReport) if they do not all fit.

        On NoRoom the picks made for this call are undone (capacity, instance counts,
        group members), so the next request planned here sees the hosts as they are."""
        self._use(context)
        picks: list[Pick] = []
        for placed in range(count):
            self._refresh(context)
            passing = [i for i, row in enumerate(self._rows)
                       if row.option is not None and row.rejected_by is None]
            if not passing:
                report = self._report(count, placed)
                self._undo(picks, context)
                raise NoRoom(report)
            ordered = self._best(passing)
            chosen_index = self.rng.choice(ordered[:self.host_subset_size])
            chosen = self.hosts[chosen_index]
            allocations = self._rows[chosen_index].option
            assert allocations is not None
            chosen.usage.consume(allocations)
            chosen.instances += 1
            if context.policy:
                context.group_hosts[chosen.uuid] += 1
                self._dirty = set(range(len(self.hosts)))
            else:
                self.touched(allocations, chosen.uuid)
            alternates = self._alternates(ordered, chosen_index, passing)
            picks.append(Pick(chosen, allocations, alternates))
        return picks

    def _undo(self, picks: list[Pick], context: PlanContext) -> None:
        for pick in picks:
            pick.host.usage.release(pick.allocations)
            pick.host.instances -= 1
            if context.policy:
                context.group_hosts[pick.host.uuid] -= 1
                if not context.group_hosts[pick.host.uuid]:
                    del context.group_hosts[pick.host.uuid]
            self.touched(pick.allocations, pick.host.uuid)
        if context.policy:
            self._dirty = set(range(len(self.hosts)))

    def _totals(self, passing: list[int]) -> dict[int, float]:
        """Nova's weighing: each weigher's raw values normalized to 0..1 over the hosts
        compared, times its multiplier, summed."""
        totals = dict.fromkeys(passing, 0.0)
        rows = self._rows
        for position, (_, multiplier) in enumerate(self.weighers):
            values = [rows[i].raw[position] for i in passing]
            low, high = min(values), max(values)
            if high == low:
                continue  # every host gets 0.0 from this weigher
            span = high - low
            for i, value in zip(passing, values, strict=True):
                totals[i] += multiplier * ((value - low) / span)
        return totals

    def _best(self, passing: list[int], whole: bool = False) -> list[int]:
        """Passing hosts best first (ties: Placement's random order); only the head of the
        order unless `whole`."""
        totals = self._totals(passing)
        wanted = self.host_subset_size + self.max_attempts + ORDER_MARGIN
        if whole or len(passing) <= wanted:
            return sorted(passing, key=lambda i: (-totals[i], i))
        return heapq.nsmallest(wanted, passing, key=lambda i: (-totals[i], i))

    def _alternates(self, ordered: list[int], chosen: int,
                    passing: list[int]) -> list[tuple[HostState, Allocations]]:
        """The next best hosts that still fit after the pick, up to max_attempts - 1."""
        wanted = self.max_attempts - 1
        if not wanted:
            return []
        found = self._fitting(ordered, chosen, wanted)
        if len(found) < wanted and len(ordered) < len(passing):
            found = self._fitting(self._best(passing, whole=True), chosen, wanted)
        return found

    def _fitting(self, ordered: Iterable[int], chosen: int,
                 wanted: int) -> list[tuple[HostState, Allocations]]:
        found = []
        for index in ordered:
            if index == chosen:
                continue
            option = self.hosts[index].fitting_option()
            if option is not None:
                found.append((self.hosts[index], option))
                if len(found) == wanted:
                    break
        return found

    def _report(self, count: int, placed: int) -> FilterReport:
        fitting = [i for i, row in enumerate(self._rows) if row.option is not None]
        removed, names = [], {}
        for position, host_filter in enumerate(self.filters):
            out = [self.hosts[i].name for i in fitting if self._rows[i].rejected_by == position]
            name = type(host_filter).__name__
            removed.append((name, host_filter.reason, len(out)))
            names[name] = sorted(out)
        return FilterReport(count, placed, len(self.hosts), len(self.hosts) - len(fitting),
                            removed, names)


def plan(hosts: list[HostState], count: int, filters: list[HostFilter],
         weighers: list[tuple[HostWeigher, float]], context: PlanContext,
         host_subset_size: int = 1, max_attempts: int = 1,
         rng: random.Random | None = None) -> list[Pick]:
    """One Pick per instance, or NoRoom (with a FilterReport) if they do not all fit."""
    return Planner(hosts, filters, weighers, host_subset_size, max_attempts,
                   rng).place(count, context)

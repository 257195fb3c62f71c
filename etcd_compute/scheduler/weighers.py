"""Host weighers: each a tiny class with one method, multiplier from schedule.yaml.

As in Nova, every weigher's raw values are normalized to 0..1 over the
hosts being compared, multiplied by its multiplier, and summed; the highest
total wins. A positive multiplier on a free-resource weigher spreads
(most free first); a negative one packs (fullest first). To add one: write
a class here with `raw_weight`, give it a multiplier under `scheduler.weighers`.
"""

from __future__ import annotations

from etcd_compute.errors import ConfigError
from etcd_compute.scheduler.context import PlanContext
from etcd_compute.scheduler.hoststate import HostState


class HostWeigher:
    def raw_weight(self, host: HostState, context: PlanContext) -> float:
        raise NotImplementedError


class RAMWeigher(HostWeigher):
    def raw_weight(self, host: HostState, context: PlanContext) -> float:
        return host.free.get("MEMORY_MB", 0)


class CPUWeigher(HostWeigher):
    def raw_weight(self, host: HostState, context: PlanContext) -> float:
        return host.free.get("VCPU", 0)


class DiskWeigher(HostWeigher):
    def raw_weight(self, host: HostState, context: PlanContext) -> float:
        return host.free.get("DISK_GB", 0)


class BuildFailureWeigher(HostWeigher):
    """Hosts whose recent builds failed come last (their failures are in /stats/<rp>)."""

    def raw_weight(self, host: HostState, context: PlanContext) -> float:
        return -host.recent_failures(context.now)


class SoftAffinityWeigher(HostWeigher):
    """Prefer (affinity) or avoid (anti-affinity) hosts with group members: Nova's
    ServerGroupSoftAffinityWeigher and ServerGroupSoftAntiAffinityWeigher in one.

    A soft-affinity or soft-anti-affinity group is placed by this alone (best effort:
    never no valid host for its sake); for the hard policies it orders what the filters
    let through, and with AffinityFilter/AntiAffinityFilter removed from
    `scheduler.filters` it makes them soft too.
    """

    def raw_weight(self, host: HostState, context: PlanContext) -> float:
        members = context.group_hosts[host.uuid]
        if context.policy in ("affinity", "soft-affinity"):
            return members
        if context.policy in ("anti-affinity", "soft-anti-affinity"):
            return -members
        return 0.0


def all_weighers() -> dict[str, type[HostWeigher]]:
    return {cls.__name__: cls for cls in HostWeigher.__subclasses__()}


def enabled_weighers(multipliers: dict[str, float]) -> list[tuple[HostWeigher, float]]:
    """(weigher, multiplier) for each configured weigher with a non-zero multiplier."""
    known = all_weighers()
    unknown = [name for name in multipliers if name not in known]
    if unknown:
        raise ConfigError(f"scheduler.weighers: unknown weigher {unknown[0]!r}; known: "
                          + ", ".join(sorted(known)))
    return [(known[name](), float(m)) for name, m in multipliers.items() if m]


def normalize(values: list[float]) -> list[float]:
    low, high = min(values), max(values)
    if high == low:
        return [0.0 for _ in values]
    return [(v - low) / (high - low) for v in values]


def weigh(hosts: list[HostState], weighers: list[tuple[HostWeigher, float]],
          context: PlanContext) -> list[tuple[float, HostState]]:
    """(total weight, host), best first; ties keep Placement's (random) order."""
    totals = [0.0] * len(hosts)
    for weigher, multiplier in weighers:
        raw = [weigher.raw_weight(host, context) for host in hosts]
        for i, value in enumerate(normalize(raw)):
            totals[i] += multiplier * value
    order = sorted(range(len(hosts)), key=lambda i: -totals[i])
    return [(totals[i], hosts[i]) for i in order]

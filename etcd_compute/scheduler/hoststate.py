"""What the scheduler knows about each candidate host while it plans.

Built from one `GET /allocation_candidates` (allocation requests and
provider summaries) plus etcd's view (`Cluster`): heartbeats and stats (one
read), then the instance counts of the live hosts Placement may offer (counted
by etcd), all read while Placement answers (`LiveHosts`). Free capacity lives
in one `ProviderUsage` shared by all hosts, so placing an instance "virtually
depletes" it (a sharing provider used by two hosts is depleted for both)
before the next pick.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from etcd_compute import shards
from etcd_compute.etcd import Entry, KeyValueStore, Range, RangeResult
from etcd_compute.hosts import decode_heartbeat, decode_stats, heartbeat_and_stats_ranges, host_of
from etcd_compute.instances.records import count_by_host
from etcd_compute.keys import Keys
from etcd_compute.placement import DISABLED_TRAIT

SHARING_TRAIT = "MISC_SHARES_VIA_AGGREGATE"
# Build failures older than this no longer count against a host.
BUILD_FAILURE_WINDOW_SECONDS = 3600.0

Allocations = dict[str, dict[str, dict[str, int]]]  # {rp: {"resources": {rc: amount}}}


class ProviderUsage:
    """Free capacity per provider and resource class, depleted as we plan."""

    def __init__(self, summaries: dict[str, Any]):
        self.free: dict[str, dict[str, int]] = {
            rp: {rc: int(v["capacity"]) - int(v["used"]) for rc, v in s["resources"].items()}
            for rp, s in summaries.items()
        }
        # When each provider's summary was asked (the service's kept answers).
        self.asked_at: dict[str, float] = dict.fromkeys(self.free, 0.0)

    def fits(self, allocations: Allocations) -> bool:
        return all(
            self.free.get(rp, {}).get(rc, 0) >= amount
            for rp, alloc in allocations.items()
            for rc, amount in alloc["resources"].items()
        )

    def consume(self, allocations: Allocations) -> None:
        for rp, alloc in allocations.items():
            for rc, amount in alloc["resources"].items():
                self.free[rp][rc] -= amount

    def release(self, allocations: Allocations) -> None:
        """Undo `consume` (a plan given up)."""
        for rp, alloc in allocations.items():
            for rc, amount in alloc["resources"].items():
                self.free[rp][rc] += amount

    def add(self, summaries: dict[str, Any], asked_at: float = 0.0) -> None:
        """Providers of another candidates answer not known yet (the service plans several
        request shapes on one usage, so that what one shape takes the others see)."""
        for rp, summary in summaries.items():
            if rp not in self.free:
                self.free[rp] = {rc: int(v["capacity"]) - int(v["used"])
                                 for rc, v in summary["resources"].items()}
                self.asked_at[rp] = asked_at

    def take(self, claims: list[tuple[float, Allocations]]) -> None:
        """Claims made after a provider's summary was asked, taken off its free capacity."""
        for at, allocations in claims:
            for rp, alloc in allocations.items():
                if rp in self.free and self.asked_at[rp] <= at:
                    for rc, amount in alloc["resources"].items():
                        self.free[rp][rc] = self.free[rp].get(rc, 0) - amount


@dataclass(eq=False)
class HostState:
    """A compute host (a root provider) that Placement says can take the request (compared
    by identity: the planner keeps one per host)."""

    uuid: str
    name: str
    usage: ProviderUsage
    # Allocation requests Placement offered for this host; any that still fits will do.
    options: list[Allocations] = field(default_factory=list)
    traits: set[str] = field(default_factory=set)
    # The host's provider tree (root and nested children) as far as Placement showed it.
    tree: set[str] = field(default_factory=set)
    alive: bool = False
    instances: int = 0
    build_failures: list[float] = field(default_factory=list)

    @property
    def disabled(self) -> bool:
        return DISABLED_TRAIT in self.traits

    @property
    def free(self) -> dict[str, int]:
        """Free amount per resource class over the host's provider tree (read only)."""
        if not self.tree or self.tree == {self.uuid}:
            return self.usage.free.get(self.uuid, {})  # one provider: no sum to make
        total: Counter[str] = Counter()
        for rp in self.tree:
            total.update(self.usage.free.get(rp, {}))
        return dict(total)

    def fitting_option(self) -> Allocations | None:
        return next((option for option in self.options if self.usage.fits(option)), None)

    def recent_failures(self, now: float | None = None) -> int:
        now = now or time.time()
        return sum(1 for t in self.build_failures if now - t < BUILD_FAILURE_WINDOW_SECONDS)


def _host_of(allocations: Allocations, summaries: dict[str, Any]) -> str:
    """The compute host of an allocation request: the root of a non-sharing provider."""
    roots = []
    for rp in allocations:
        summary = summaries.get(rp, {})
        root = summary.get("root_provider_uuid", rp)
        sharing = SHARING_TRAIT in summaries.get(root, {}).get("traits", [])
        roots.append((sharing, root))
    return sorted(roots)[0][1]


@dataclass
class Cluster:
    """etcd's view of the hosts: who is alive (and its name), stats, instance counts."""

    alive: dict[str, str] = field(default_factory=dict)
    build_failures: dict[str, list[float]] = field(default_factory=dict)
    instances: Counter[str] = field(default_factory=Counter)

    @classmethod
    def from_reads(cls, keys: Keys, results: list[RangeResult], instances: Counter[str],
                   only: set[str] | None = None,
                   cache: dict[str, dict[tuple[str, int], dict[str, Any]]] | None = None
                   ) -> Cluster:
        """The view from `hosts.heartbeat_and_stats_ranges`' results; with `only` (the
        candidate providers), other hosts' messages are skipped undecoded, and `cache` (a
        long-lived Scheduler's) keeps the messages already validated, by key and mod_revision:
        schema-validating every heartbeat on every request cost ~80% of a one-instance
        request at 1000 hosts (bench/REPORT.md)."""
        cache = {} if cache is None else cache
        alive_entries, stats_entries = (result.entries for result in results)
        alive = {rp: message.get("name", rp) for rp, message in decode_some(
            decode_heartbeat, keys.alive_prefix(), alive_entries, only, cache).items()}
        stats = decode_some(decode_stats, keys.stats_prefix(), stats_entries, only, cache)
        return cls(alive, {rp: s.get("build_failures", []) for rp, s in stats.items()},
                   instances)

    @classmethod
    def read(cls, store: KeyValueStore, only: set[str] | None = None,
             cache: dict[str, dict[tuple[str, int], dict[str, Any]]] | None = None,
             max_ops: int = 128) -> Cluster:
        """etcd's view in two round trips: heartbeats and stats, then the instance counts
        (of the hosts in `only`, or of every host)."""
        results, _ = store.read_many(heartbeat_and_stats_ranges(store.keys))
        counts = count_by_host(store) if only is None else instance_counts(store, only,
                                                                           max_ops)
        return cls.from_reads(store.keys, results, counts, only, cache)


@dataclass
class LiveHosts:
    """etcd's side of one request, read while Placement answers: heartbeats and stats
    (`hosts.heartbeat_and_stats_ranges`' results), how many hosts are alive, and the instance counts
    of those Placement may offer (`counted`: alive, in the shards asked about if any)."""

    heartbeats: list[RangeResult]
    alive: int
    counts: Counter[str]
    counted: set[str]

    @classmethod
    def read(cls, store: KeyValueStore, exclude: Iterable[str] = (),
             aggregates: Iterable[str] | None = None, max_ops: int = 128) -> LiveHosts:
        """Two round trips at most hosts (one per `max_ops` hosts counted)."""
        results, _ = store.read_many(heartbeat_and_stats_ranges(store.keys))
        alive = {host_of(entry.key) for entry in results[0].entries}
        counted = alive - set(exclude)
        if aggregates is not None:
            asked = set(aggregates)
            counted = {rp for rp in counted if shards.aggregate_of(rp) in asked}
        return cls(results, len(alive), instance_counts(store, counted, max_ops), counted)


def instance_counts(store: KeyValueStore, hosts: Iterable[str], max_ops: int) -> Counter[str]:
    """Instances per host (its spec keys, counted by etcd: no key is sent) for `hosts` only,
    in as few round trips as etcd's --max-txn-ops allows."""
    hosts = sorted(hosts)
    counts: Counter[str] = Counter()
    for start in range(0, len(hosts), max(1, max_ops)):
        chunk = hosts[start:start + max(1, max_ops)]
        results, _ = store.read_many([Range(store.keys.specs(h), count_only=True)
                                      for h in chunk])
        for host, result in zip(chunk, results, strict=True):
            if result.count:
                counts[host] = result.count
    return counts


def decode_some(decode: Callable[[bytes], dict[str, Any] | None], prefix: str,
                 entries: list[Entry], only: set[str] | None,
                 cache: dict[str, dict[tuple[str, int], dict[str, Any]]]
                 ) -> dict[str, dict[str, Any]]:
    """Messages `decode` reads among `entries` (None: unreadable, skipped) by host, only
    those in `only` if given.

    `cache[prefix]` is replaced by this read's valid messages, so it never holds more
    than the keys that exist now.
    """
    seen = cache.get(prefix, {})
    fresh: dict[tuple[str, int], dict[str, Any]] = {}
    found = {}
    for entry in entries:
        name = host_of(entry.key)
        if only is not None and name not in only:
            continue
        version = (entry.key, entry.mod_revision)
        message = seen.get(version)
        if message is None:
            message = decode(entry.value)
            if message is None:
                continue
        fresh[version] = found[name] = message
    if only is None:
        cache[prefix] = fresh
    else:
        # Keep what other requests' candidates validated while those keys stay unchanged.
        current = {(entry.key, entry.mod_revision) for entry in entries}
        cache[prefix] = {v: m for v, m in {**seen, **fresh}.items() if v in current}
    return found


def candidate_providers(candidates: dict[str, Any]) -> set[str]:
    """Every provider (and tree root) an allocation-candidates answer mentions."""
    summaries = candidates.get("provider_summaries", {})
    found = set(summaries)
    found.update(s["root_provider_uuid"] for s in summaries.values()
                 if s.get("root_provider_uuid"))
    for request in candidates.get("allocation_requests", []):
        found.update(request["allocations"])
    return found


def candidate_hosts(candidates: dict[str, Any]) -> set[str]:
    """The compute hosts (root providers) an allocation-candidates answer offers."""
    summaries = candidates.get("provider_summaries", {})
    return {_host_of(request["allocations"], summaries)
            for request in candidates.get("allocation_requests", [])}


def host_states(candidates: dict[str, Any], cluster: Cluster,
                usage: ProviderUsage | None = None, asked_at: float = 0.0) -> list[HostState]:
    """HostStates from an allocation-candidates answer, in Placement's order; their free
    capacity in `usage` (shared with other answers' hosts) or a usage of their own."""
    summaries = candidates.get("provider_summaries", {})
    if usage is None:
        usage = ProviderUsage(summaries)
    else:
        usage.add(summaries, asked_at)
    trees: dict[str, set[str]] = {}
    for rp, summary in summaries.items():
        trees.setdefault(summary.get("root_provider_uuid", rp), set()).add(rp)
    hosts: dict[str, HostState] = {}
    for request in candidates.get("allocation_requests", []):
        allocations = request["allocations"]
        host_uuid = _host_of(allocations, summaries)
        host = hosts.get(host_uuid)
        if host is None:
            host = hosts[host_uuid] = HostState(
                uuid=host_uuid,
                name=cluster.alive.get(host_uuid, host_uuid),
                usage=usage,
                traits=set(summaries.get(host_uuid, {}).get("traits", [])),
                tree=trees.get(host_uuid, {host_uuid}),
                alive=host_uuid in cluster.alive,
                instances=cluster.instances.get(host_uuid, 0),
                build_failures=list(cluster.build_failures.get(host_uuid, [])),
            )
        host.options.append(allocations)
    return list(hosts.values())


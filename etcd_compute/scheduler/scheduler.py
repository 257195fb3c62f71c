"""The Scheduler: place, claim and notify, one request at a time (see `scheduler/__init__`).

One request: allocation candidates (bounded `limit`) -> host states (etcd:
alive, stats, instance counts, group) -> filter and weigh with virtual
depletion -> claim every instance in one atomic Placement call -> specs,
SCHEDULED records and group members in one etcd transaction (claims undone
if that fails). Claim conflicts (another scheduler won the race) re-plan
with a jittered, bounded retry.

A plain `resources=` query is planned on the hosts' own accounts first (`hostview.py`:
one etcd read, no candidates query; the claim is Placement's check).
"""

from __future__ import annotations

import logging
import random
import time
from collections import Counter
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from functools import partial
from typing import Any

from etcd_compute import claims, shards
from etcd_compute.errors import (
    ConflictError,
    EtcdComputeError,
    NoValidHost,
    PlacementError,
    UsageError,
)
from etcd_compute.etcd import Store, Txn
from etcd_compute.hosts import count_alive, put_stats
from etcd_compute.instances import records
from etcd_compute.network_backend import backend_of, trait_of
from etcd_compute.placement import PlacementClient
from etcd_compute.scheduler import explain, hostview, images, spec_writer
from etcd_compute.scheduler.candidates import extra_params
from etcd_compute.scheduler.context import PlanContext
from etcd_compute.scheduler.filters import AliveFilter, enabled_filters
from etcd_compute.scheduler.hoststate import (
    Cluster,
    HostState,
    LiveHosts,
    candidate_hosts,
    candidate_providers,
    host_states,
    instance_counts,
)
from etcd_compute.scheduler.planner import FilterReport, NoRoom, Pick, plan
from etcd_compute.scheduler.request import UUID, ResourceRequest
from etcd_compute.scheduler.spec import Destination, RequestSpec, for_instance
from etcd_compute.scheduler.weighers import enabled_weighers

LOG = logging.getLogger(__name__)
# How long the number of live hosts a request saw decides whether the next one shards.
ALIVE_SEEN_MAX_AGE = 10.0


class RetryablePlan(EtcdComputeError):
    """The plan lost a race (claim 409 or group changed); plan again."""


@dataclass
class Candidates:
    """What one request can be planned on: the hosts Placement offered (and etcd's view of
    them), the planner's context, and the revision the server group was read at."""

    hosts: list[HostState]
    context: PlanContext
    group_revision: int | None
    # How many allocation requests Placement offered, and whether that was its limit.
    offered: int
    limited: bool


class Scheduler:
    """Schedules through one Placement client and one etcd Store (reused across calls)."""

    def __init__(self, config: dict[str, Any], store: Store | None = None,
                 placement: PlacementClient | None = None, rng: random.Random | None = None,
                 decoded: hostview.Cache | None = None):
        """`decoded`: a cache of validated heartbeat and stats messages to share with other
        schedulers of this process (the API's threads: one copy of 1000 hosts' messages,
        not one a thread); its entries are never changed, only replaced."""
        self.config = config
        self.settings = config["scheduler"]
        self.host_traits = frozenset({trait_of(backend_of(config))})  # every request's
        self.filters = enabled_filters(self.settings["filters"])
        self.weighers = enabled_weighers(self.settings["weighers"])
        self._store = store
        # A store handed in belongs to the caller, who closes it.
        self._owns_store = store is None
        self._placement = placement
        self.rng = rng or random.Random()
        # Claims that lost a race and were planned again; for --json and benchmarks.
        self.replans = 0
        # Sharded queries that found no room and were asked again of every host.
        self.unsharded = 0
        # Heartbeat and stats messages already validated, by (key, mod_revision).
        self._decoded: hostview.Cache = {} if decoded is None else decoded
        self._executor: ThreadPoolExecutor | None = None
        # (when, how many) hosts were alive at the last request's read.
        self._alive_seen: tuple[float, int] | None = None
        # Hosts without a heartbeat are filtered out: their instance counts do not matter.
        self._alive_filtered = any(isinstance(f, AliveFilter) for f in self.filters)
        # On the hosts' accounts (hostview.py): our claims they do not show yet; requests
        # placed, and sent on to Placement's candidates (no room, refused, an account lacking).
        self.own_claims = hostview.OwnClaims()
        self.planned_on_view = self.view_passed_on = 0
        self._view_lacking_until = 0.0

    @property
    def _background(self) -> ThreadPoolExecutor:
        """One thread for etcd reads that overlap a Placement call."""
        if self._executor is None:
            self._executor = ThreadPoolExecutor(1, thread_name_prefix="scheduler-etcd")
        return self._executor

    @property
    def store(self) -> Store:
        if self._store is None:
            self._store = Store(self.config["etcd"])
        return self._store

    @property
    def placement(self) -> PlacementClient:
        if self._placement is None:
            self._placement = PlacementClient(self.config["placement"])
        return self._placement

    # ------------------------------------------------------------ scheduling

    def select_destinations(self, request_spec: RequestSpec) -> list[Destination]:
        """Place, claim and notify `request_spec.count` instances; all or nothing.

        Raises NoValidHost (with reasons) when they do not all fit, ConflictError
        when every retry lost a race, ServiceUnavailable, UsageError.
        """
        # Imported here: the commands that hold a Scheduler for its zone's clients only
        # (show, list, destroy) never plan (~4 ms of their CPU).
        import tenacity

        spec_writer.check_txn_ops(request_spec, self.settings)
        retrying = tenacity.Retrying(
            retry=tenacity.retry_if_exception_type(RetryablePlan),
            stop=tenacity.stop_after_attempt(self.settings["claim_retries"] + 1),
            wait=tenacity.wait_random_exponential(multiplier=0.05, max=1.0),
            reraise=True,
        )
        try:
            return retrying(self._attempt, request_spec)
        except RetryablePlan as exc:
            raise ConflictError(
                f"lost the race for capacity {self.settings['claim_retries'] + 1} times "
                f"(last: {exc}); try again", 409) from None

    def _group_state(self, request_spec: RequestSpec,
                     leave_out: str | None = None) -> tuple[Counter[str], int | None]:
        """Hosts of the group's current members (but `leave_out`), and the revision they
        were read at."""
        if request_spec.group is None:
            return Counter(), None
        name, policy = request_spec.group
        members, revision = records.group_members(self.store, name)
        hosts: Counter[str] = Counter()
        for uuid, member in members.items():
            if uuid == leave_out:
                continue
            if member["policy"] != policy:
                raise UsageError(f"group {name!r} has policy {member['policy']}, "
                                 f"not {policy}")
            hosts[member["host"]] += 1
        return hosts, revision

    def plan(self, request_spec: RequestSpec, exclude: frozenset[str] = frozenset(),
             member: str | None = None) -> tuple[list[Pick], int | None]:
        """Picks for the request (not claimed), and the group revision they were planned at.

        `exclude` and `member` as for `candidates`. In a large cluster the candidates
        are asked of a few random shards first (`shards_for`); a sharded query that
        leaves no room is asked again of every host.
        """
        aggregates = self.shards_for(request_spec.request, request_spec.count,
                                     self._live_hosts)
        if aggregates is not None:
            try:
                return self._plan(request_spec, exclude, member, aggregates)
            except NoValidHost:
                self.unsharded += 1  # the whole cluster may have room the shards lack
        return self._plan(request_spec, exclude, member, None)

    def _live_hosts(self) -> int:
        """Hosts with a heartbeat: as the last request read them if that was recent (whether
        to shard needs no precision), else one count-only etcd read."""
        if self._alive_seen and time.monotonic() - self._alive_seen[0] < ALIVE_SEEN_MAX_AGE:
            return self._alive_seen[1]
        return count_alive(self.store)

    def shards_for(self, request: ResourceRequest, count: int,
                   hosts: Callable[[], int]) -> list[str] | None:
        """Shard aggregates to ask Placement about (`shards.py`), or None for every host:
        only above `shard_above_hosts` live hosts (`hosts()` counts them), and only for a
        query with an unnumbered resource group and no tree of its own."""
        threshold = self.settings["shard_above_hosts"]
        group = request.groups.get("")
        if not threshold or group is None or not group.resources or \
                any(g.in_tree for g in request.groups.values()):
            return None
        live = hosts()
        if live <= threshold:
            return None
        return shards.pick(live, self.settings["candidate_limit"] + count, self.rng)

    def candidates(self, request_spec: RequestSpec, exclude: frozenset[str] = frozenset(),
                   member: str | None = None,
                   aggregates: list[str] | None = None) -> Candidates:
        """The hosts the request could go to (none when Placement offered none), what the
        planner needs besides them, and the group revision they were read at.

        `exclude`: hosts not to consider (a dead one); `member`: an existing instance
        being placed again, which does not count as a member of its own group;
        `aggregates`: ask Placement about the hosts of these shard aggregates only.

        Round trips: the candidates query; meanwhile, on another thread, etcd's
        heartbeats and stats, then the instance counts of the live hosts (of the shards
        asked about), and the group. Nothing is read after Placement answers.
        """
        limit, max_ops = self.settings["candidate_limit"], self.settings["etcd_max_txn_ops"]
        query = request_spec.request.to_query(
            limit=limit, extra=extra_params(self.host_traits, aggregates))
        etcd_view = self._background.submit(
            lambda: (LiveHosts.read(self.store, exclude, aggregates, max_ops),
                     self._group_state(request_spec, member)))
        try:
            candidates = self.placement.allocation_candidates(query)
        except PlacementError as exc:
            if not explain.unknown_trait(exc):
                raise UsageError(f"Placement rejected the query: {exc}") from None
            candidates = {"allocation_requests": [], "provider_summaries": {}}
        live, (group_hosts, group_revision) = etcd_view.result()
        self._alive_seen = (time.monotonic(), live.alive)
        offered = len(candidates["allocation_requests"])
        hosts: list[HostState] = []
        if offered:
            counts = live.counts
            uncounted = candidate_hosts(candidates) - exclude - live.counted
            if uncounted and not self._alive_filtered:  # else filtered out, count or not
                counts = counts + instance_counts(self.store, uncounted, max_ops)
            cluster = Cluster.from_reads(self.store.keys, live.heartbeats, counts,
                                         candidate_providers(candidates), self._decoded)
            hosts = [host for host in host_states(candidates, cluster)
                     if host.uuid not in exclude]
        context = self._context(request_spec, group_hosts)
        return Candidates(hosts, context, group_revision, offered,
                          offered >= min(limit, request_spec.request.limit or limit))

    def explain(self, request_spec: RequestSpec, report: FilterReport | None,
                limited: bool = False) -> list[str]:
        """Why nothing (more) fits: `report` from the planner, None when Placement offered
        nothing."""
        return explain.explain(self.placement, request_spec.request, report, limited,
                               extra_params(self.host_traits))

    def _plan(self, request_spec: RequestSpec, exclude: frozenset[str], member: str | None,
              aggregates: list[str] | None) -> tuple[list[Pick], int | None]:
        found = self.candidates(request_spec, exclude, member, aggregates)
        if not found.offered:
            # Reasons only for the whole cluster: a sharded miss is asked again (`plan`).
            raise NoValidHost([] if aggregates else self.explain(request_spec, None))
        try:
            picks = plan(found.hosts, request_spec.count, self.filters, self.weighers,
                         found.context, self.settings["host_subset_size"],
                         self.settings["max_attempts"], self.rng)
        except NoRoom as exc:
            if aggregates:
                raise NoValidHost([]) from None
            raise NoValidHost(self.explain(request_spec, exc.report, found.limited)) from None
        return picks, found.group_revision

    def place(self, spec: dict[str, Any], exclude: frozenset[str],
              destination: str | None = None) -> Pick:
        """Where an existing instance (its spec) would go now (`for_instance`), `exclude`d
        hosts aside, or only to `destination`; nothing claimed; NoValidHost: nowhere."""
        picks, _ = self.plan(for_instance(spec, destination), exclude, member=spec["uuid"])
        return picks[0]

    def _attempt(self, request_spec: RequestSpec) -> list[Destination]:
        placed = self._attempt_on_view(request_spec)
        if placed is not None:
            return placed
        picks, group_revision = self.plan(request_spec)
        destinations = self.destinations(request_spec, picks)
        self.transaction(request_spec, destinations, group_revision)  # refused before a claim
        try:
            self.claim(destinations, request_spec)
        except ConflictError as exc:
            self.replans += 1
            LOG.info("claim lost a race (%s); planning again", exc.code or exc)
            raise RetryablePlan(str(exc)) from None
        self._write_claimed(request_spec, destinations, group_revision)
        return destinations

    def _write_claimed(self, request_spec: RequestSpec, destinations: list[Destination],
                       group_revision: int | None) -> int:
        """Write what was claimed (the revision); its group changed meanwhile: plan again."""
        # Built again so that the specs' requested_at is the write's time, not the claim's.
        txn = self.transaction(request_spec, destinations, group_revision, checked=False)
        written = self.write(txn, destinations)
        if written is None:
            self.replans += 1
            raise RetryablePlan(f"group {request_spec.group[0] if request_spec.group else ''} "
                                "changed while we planned")
        return written

    def _attempt_on_view(self, request_spec: RequestSpec) -> list[Destination] | None:
        """The request placed on the hosts' accounts, or None (a query beyond resources, a
        host without one, no room, every host refused): Placement's candidates decide."""
        resources = hostview.plain_resources(request_spec.request)
        if resources is None or not self.settings["host_view"] or \
                time.monotonic() < self._view_lacking_until:
            return None
        group = self._background.submit(self._group_state, request_spec) \
            if request_spec.group else None
        view = hostview.HostView.read(self.store, self._decoded)
        group_hosts, group_revision = group.result() if group else (Counter(), None)
        if not view.usable:  # hosts without an account (older computes): not for a while
            self._view_lacking_until = time.monotonic() + hostview.LACKING_RECHECK_SECONDS
            self.view_passed_on += 1
            return None
        limit = min(self.settings["candidate_limit"],
                    request_spec.request.limit or self.settings["candidate_limit"])
        hosts = view.host_states(resources, limit, self.rng,
                                 self.own_claims.unseen(view.as_of()), self.host_traits)
        try:
            picks = plan(hosts, request_spec.count, self.filters, self.weighers,
                         self._context(request_spec, group_hosts),
                         self.settings["host_subset_size"], self.settings["max_attempts"],
                         self.rng)
        except NoRoom:
            self.view_passed_on += 1
            return None
        destinations = self.destinations(request_spec, picks)
        self.transaction(request_spec, destinations, group_revision)  # refused before a claim
        claimed = hostview.claim_somewhere(
            lambda tried: self.claim(tried, request_spec), destinations, picks)
        if claimed is None:
            self.view_passed_on += 1
            return None
        written = self._write_claimed(request_spec, claimed, group_revision)
        self.own_claims.add(written, ((d.host, d.allocations) for d in claimed))
        self.planned_on_view += 1
        return claimed

    def _context(self, request_spec: RequestSpec, group_hosts: Counter[str]) -> PlanContext:
        return PlanContext(
            policy=request_spec.group[1] if request_spec.group else None,
            group_hosts=group_hosts,
            max_instances_per_host=self.settings["max_instances_per_host"],
            group_max=request_spec.group_max or 1,
            image_properties=images.properties(request_spec.glance_image),
        )

    # The steps of one attempt, also used one zone at a time by a request across zones
    # (etcd_compute/zones/federation.py).

    def destinations(self, request_spec: RequestSpec, picks: list[Pick],
                     first: int = 0) -> list[Destination]:
        """A new instance (uuid, name) per pick; `first`: the index of the first one in the
        whole request (names NAME-<index+1>)."""
        return spec_writer.destinations(request_spec, picks, first)

    def transaction(self, request_spec: RequestSpec, destinations: list[Destination],
                    group_revision: int | None, checked: bool = True) -> Txn:
        """The one etcd transaction that writes `destinations`; UsageError (before any
        claim) when etcd would refuse it for its size. `checked=False` once claimed: the
        same transaction, stamped now, is never refused then (the claim must be undone)."""
        txn = spec_writer.transaction(self.store.keys, destinations, request_spec,
                                      self.settings, group_revision)
        if checked and txn.size() > self.settings["etcd_max_request_bytes"]:
            # Refused before claiming: etcd would refuse the write and the claim be undone.
            raise UsageError(
                f"this request writes about {txn.size()} bytes to etcd in one transaction; "
                f"etcd allows {self.settings['etcd_max_request_bytes']} (fewer instances or "
                "less user-data, or raise etcd's --max-request-bytes and "
                "scheduler.etcd_max_request_bytes together)")
        return txn

    def claim(self, destinations: list[Destination],
              request_spec: RequestSpec | None = None) -> None:
        """Claim every destination in one atomic Placement call (ConflictError: none), for
        the request's project and user (`request_spec`; else the configured ones)."""
        owners = None
        if request_spec is not None:
            owner = request_spec.owner(self.settings)
            owners = {d.uuid: owner for d in destinations}
        claims.claim(self.placement, {d.uuid: d.allocations for d in destinations},
                     self.settings, owners)

    def write(self, txn: Txn, destinations: list[Destination]) -> int | None:
        """Commit `txn`: its revision, or None when a compare failed; either way but
        success, the destinations' claims are undone."""
        return claims.written_or_undone(
            partial(self.store.commit, txn),
            partial(self._unclaim, [d.uuid for d in destinations]))

    def _unclaim(self, consumers: list[str]) -> None:
        left = claims.unclaim(self.placement, consumers)
        if left:
            LOG.error("could not free the claims of %s; free them with "
                      "DELETE /allocations/<uuid>", ", ".join(left))

    # ----------------------------------------------------------------- stats

    def update_resource_stats(self, name: str, stats: dict[str, Any]) -> None:
        """Write `stats` (host_stats fields) for host `name` (provider uuid or name)."""
        rp_uuid = name
        if not UUID.match(name):
            found = self.placement.list_providers(name=name)
            if not found:
                raise UsageError(f"no resource provider named {name!r}")
            rp_uuid = found[0]["uuid"]
        put_stats(self.store, rp_uuid, stats)

    def close(self) -> None:
        if self._executor is not None:
            self._executor.shutdown(wait=True)
            self._executor = None
        if self._store is not None and self._owns_store:
            self._store.close()


def select_destinations(request_spec: RequestSpec, config: dict[str, Any]) -> list[Destination]:
    """Module-level form of Scheduler.select_destinations (a fresh client per call)."""
    scheduler = Scheduler(config)
    try:
        return scheduler.select_destinations(request_spec)
    finally:
        scheduler.close()


def update_resource_stats(name: str, stats: dict[str, Any], config: dict[str, Any]) -> None:
    """Module-level form of Scheduler.update_resource_stats."""
    scheduler = Scheduler(config)
    try:
        scheduler.update_resource_stats(name, stats)
    finally:
        scheduler.close()

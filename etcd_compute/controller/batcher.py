"""The scheduler service's pass over the queue: everything pending, planned and claimed together.

`Batcher.run(pending)`, for every request read from /queue/requests/:

1. hosts, per distinct request shape (its query), sized for the batch (`candidate_limit`
   + the shape's instances, rounded): a plain `resources=` shape on the hosts' own
   accounts of their capacity (the host cache's, from the watch: no Placement call),
   any other on one `GET /allocation_candidates`, kept and reused for
   `service_candidates_max_age` seconds (`offers.py`);
2. plan: in arrival order, each request on its shape's Planner; all shapes share
   one ProviderUsage and see each other's picks (virtual depletion across the
   batch); hosts' heartbeats, stats and instance counts come from the HostCache;
3. claim: one atomic `POST /allocations` for every planned instance;
4. write: instances, answers and request deletions in as few etcd transactions as
   --max-txn-ops and --max-request-bytes allow, each fenced by our leadership.

A 409 from Placement (someone else took the capacity, an account was behind) splits
the batch in two halves, each planned again from fresh candidates; a transaction whose
compares
fail is split too, with its claims kept, until the request at fault is alone.
Innocent requests are never failed for another's conflict. A request that
does not fit in the batch's candidates is planned alone as the direct path
would (`Scheduler.plan`: its own candidates, and why nothing fits). A request
that keeps losing races, or whose group changed under it, is left in the queue
and tried again in the next pass (at most `claim_retries` times).
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import random
import time
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from etcd_compute import claims
from etcd_compute.controller.hostcache import HostCache
from etcd_compute.controller.offers import Offers
from etcd_compute.errors import (
    ConflictError,
    EtcdComputeError,
    NoValidHost,
    UsageError,
)
from etcd_compute.etcd import Compare, Delete, KeyValueStore, Txn
from etcd_compute.instances import records
from etcd_compute.placement import PlacementClient
from etcd_compute.scheduler import images, spec_writer
from etcd_compute.scheduler.context import PlanContext
from etcd_compute.scheduler.hoststate import ProviderUsage
from etcd_compute.scheduler.planner import NoRoom, Pick, Planner
from etcd_compute.scheduler.queue import Pending, answer_of, answer_ops, expired, expired_error
from etcd_compute.scheduler.scheduler import Scheduler
from etcd_compute.scheduler.spec import Destination

LOG = logging.getLogger("etcd_compute.controller")


class LostLeadership(EtcdComputeError):
    """We may no longer lead: stop before writing anything."""


@dataclass
class GroupState:
    """A server group as this pass sees it: its members' hosts (planned ones too)."""

    hosts: Counter[str]
    revision: int
    policy: str


@dataclass
class Planned:
    request: Pending
    destinations: list[Destination]
    txn: Txn  # instances, answer, request deletion (without the fence)
    group_revision: int | None


def batch_limit(candidate_limit: int, instances: int) -> int:
    """Candidates to ask for a batch: `candidate_limit` more than its instances, rounded up
    to a multiple of 64 so that batches of similar size can share a kept answer."""
    return -(-(candidate_limit + instances) // 64) * 64


def in_use(request: Pending) -> UsageError:
    return UsageError(f"request {request.uuid}: its instance uuids are in use (a request "
                      "uuid used twice)")


class Batcher:
    def __init__(self, store: KeyValueStore, placement: PlacementClient, scheduler: Scheduler,
                 cache: HostCache, fence: Callable[[], Compare],
                 is_leader: Callable[[], bool], answer_lease: Callable[[], int | None],
                 rng: random.Random | None = None):
        self.store, self.keys = store, store.keys
        self.placement = placement
        self.scheduler = scheduler
        self.settings = scheduler.settings
        self.cache = cache
        self.fence, self.is_leader, self.answer_lease = fence, is_leader, answer_lease
        self.rng = rng or random.Random()
        self.offers = Offers(placement, self.settings, cache, scheduler.shards_for, self.rng,
                             scheduler.host_traits)
        # Requests tried and left for the next pass: how often, and not before when.
        self.attempts: Counter[str] = Counter()
        self.not_before: dict[str, float] = {}
        self.stats: Counter[str] = Counter()
        # Seconds spent per phase (candidates, plan, claim, write), for the pass's log line.
        self.seconds: Counter[str] = Counter()

    @contextlib.contextmanager
    def _timed(self, phase: str) -> Iterator[None]:
        started = time.monotonic()
        try:
            yield
        finally:
            self.seconds[phase] += time.monotonic() - started

    # --- one pass ---------------------------------------------------------------------------

    def run(self, pending: list[Pending]) -> int:
        """Answer what can be answered now; leave the rest in the queue for the next pass.
        How many requests were due (the others wait for their retry time)."""
        now = time.monotonic()
        self.offers.begin_pass()
        due = [r for r in pending if self.not_before.get(r.uuid, 0.0) <= now]
        for request in due:
            if not request.uuid:  # not a request uuid: nobody to answer
                LOG.warning("removing %r from the queue: not a request key", request.entry.key)
                self._commit([], removals=[request])
            elif request.fault is not None:
                LOG.warning("request %s refused: %s", request.uuid, request.fault)
                self._answer(request, request.fault)
            elif expired(request.message):
                self._expired(request)
        good = [r for r in due if r.uuid and r.fault is None and not expired(r.message)]
        if good:
            self._schedule(good, len(good))
        return len(due)

    def free_stale_claims(self, pending: list[Pending]) -> list[Pending]:
        """Claims a previous leader made for these requests but never wrote (the consumer
        has allocations, no instance exists) are freed, so planning starts clean. Returns
        the requests whose instance uuids are in use (their request uuid was used before)."""
        in_use = []
        for request in pending:
            if request.spec is None or request.fault is not None:
                continue
            for uuid in request.instances:
                if self.store.get(self.keys.location(uuid)) is not None:
                    in_use.append(request)
                    break
                if self.placement.get_allocations(uuid).get("allocations"):
                    self.placement.delete_allocations(uuid)
                    LOG.info("request %s: freed instance %s's claim left by an earlier "
                             "attempt", request.uuid, uuid)
        return in_use

    # --- plan, claim, write -----------------------------------------------------------------

    def _schedule(self, requests: list[Pending], batch: int) -> None:
        reused = self.offers.reused
        started = time.monotonic()
        planned, alone = self._plan(requests)
        self.seconds["plan"] += time.monotonic() - started
        if planned:
            self._claim_and_write(planned, batch)
        if alone and self.offers.reused > reused:
            # A kept view (an answer, the accounts) ran out of room: fresh candidates first.
            self.offers.refused()
            planned, alone = self._plan(alone)
            if planned:
                self._claim_and_write(planned, batch)
        for request in alone:
            self._schedule_alone(request)

    def _claim_and_write(self, planned: list[Planned], batch: int) -> None:
        if not self.is_leader():
            raise LostLeadership("no longer the leader")
        allocations = {d.uuid: d.allocations for p in planned for d in p.destinations}
        owners = {d.uuid: p.request.spec.owner(self.settings)
                  for p in planned if p.request.spec for d in p.destinations}
        try:
            with self._timed("claim"):
                claims.claim(self.placement, allocations, self.settings, owners)
        except ConflictError as exc:
            self.stats["claim_conflicts"] += 1
            self.offers.refused()
            if len(planned) > 1:
                half = len(planned) // 2
                LOG.info("claim of %d requests lost a race (%s); splitting", len(planned),
                         exc.code or exc)
                for part in (planned[:half], planned[half:]):
                    self._schedule([p.request for p in part], batch)
            else:
                # Alone and refused: another scheduler won, or an earlier attempt of ours
                # left claims for these consumers (a leader that died): free those.
                request = planned[0].request
                if self.free_stale_claims([request]):
                    self._answer(request, in_use(request))
                else:
                    self._retry_later(request, f"lost the race for capacity ({exc})")
            return
        self.offers.claimed(list(allocations.values()))
        # Stamped again: a spec's requested_at is the write's time, not the claim's (where a
        # host's notification latency starts).
        self._write([dataclasses.replace(p, txn=self._transaction(p.request, p.destinations,
                                                                  p.group_revision))
                     for p in planned], batch)

    def _expired(self, request: Pending, destinations: Sequence[Destination] = ()) -> None:
        """Its client gave up (its deadline passed): never placed now, whatever we claimed."""
        LOG.info("request %s expired at its client's deadline; not placed", request.uuid)
        if destinations:
            self._unclaim([d.uuid for d in destinations])
        self._answer(request, expired_error(request.message or {}))

    def _write(self, planned: list[Planned], batch: int) -> None:
        """The etcd side: chunks within etcd's limits; a failed chunk is split. A request
        whose client's deadline passed meanwhile is not written: its claims are freed."""
        for chunk in self._chunks(planned):
            late = [p for p in chunk if expired(p.request.message)]
            for p in late:
                self._expired(p.request, p.destinations)
            chunk = [p for p in chunk if p not in late]
            if not chunk:
                continue
            answers = [(p.request, answer_of(p.destinations, batch)) for p in chunk]
            written = self._commit(answers, extra=[p.txn for p in chunk])
            if written:
                self.offers.written(written, ((d.host, d.allocations)
                                              for p in chunk for d in p.destinations))
                self.stats["answered"] += len(chunk)
                for p in chunk:
                    self._forget(p.request.uuid)
                continue
            if len(chunk) > 1:
                half = len(chunk) // 2
                self._write(chunk[:half], batch)
                self._write(chunk[half:], batch)
            else:
                self._write_failed(chunk[0])

    def _write_failed(self, planned: Planned) -> None:
        """One request's transaction failed while we lead: free its claims and find out why."""
        request = planned.request
        self._unclaim([d.uuid for d in planned.destinations])
        if self.store.get(request.entry.key) is None:
            LOG.info("request %s withdrawn before it was answered", request.uuid)
            self._forget(request.uuid)
        elif any(self.store.get(self.keys.location(u)) is not None for u in request.instances) \
                or self.store.get(self.keys.queue_answer(request.uuid)) is not None:
            self._answer(request, in_use(request))
        else:
            self._retry_later(request, "its server group changed while it was planned")

    def _schedule_alone(self, request: Pending) -> None:
        """What the direct path would do for this request: its own candidates query."""
        assert request.spec is not None
        try:
            picks, group_revision = self.scheduler.plan(request.spec)
        except (NoValidHost, UsageError) as exc:
            self._answer(request, exc)
            return
        planned = self._planned(request, picks, group_revision)
        if planned is not None:
            self._claim_and_write([planned], 1)

    def _plan(self, requests: list[Pending]) -> tuple[list[Planned], list[Pending]]:
        """Planned requests, and those that did not fit the batch's candidates."""
        shapes: dict[str, list[Pending]] = {}
        for request in requests:
            assert request.spec is not None
            shapes.setdefault(request.spec.request.to_query(), []).append(request)
        usage, cluster = ProviderUsage({}), self.cache.cluster()
        planners: dict[str, Planner] = {}
        alone: list[Pending] = []
        for shape, members in shapes.items():
            first = members[0].spec
            assert first is not None
            instances = sum(m.spec.count for m in members if m.spec)
            limit = batch_limit(self.settings["candidate_limit"], instances)
            with self._timed("candidates"):
                hosts = self.offers.hosts(first.request, instances, limit, cluster, usage)
            planners[shape] = Planner(
                hosts, self.scheduler.filters, self.scheduler.weighers,
                self.settings["host_subset_size"], self.settings["max_attempts"], self.rng)
        usage.take(self.offers.candidates.claims)
        groups: dict[str, GroupState] = {}
        planned = []
        for request in requests:
            spec = request.spec
            assert spec is not None
            try:
                context = self._context(spec.group, groups, spec.group_max)
                context.image_properties = images.properties(spec.glance_image)
                picks = planners[spec.request.to_query()].place(spec.count, context)
            except UsageError as exc:  # a group with the other policy
                self._answer(request, exc)
                continue
            except NoRoom:
                alone.append(request)
                continue
            for pick in picks:
                for shape, planner in planners.items():
                    if shape != spec.request.to_query():
                        planner.placed_elsewhere(pick.host.uuid, pick.allocations)
            group_revision = groups[spec.group[0]].revision if spec.group else None
            item = self._planned(request, picks, group_revision)
            if item is not None:
                planned.append(item)
        return planned, alone

    def _context(self, group: tuple[str, str] | None,
                 groups: dict[str, GroupState], group_max: int | None = None) -> PlanContext:
        """The request's context; requests of one group share its members, planned ones
        included. UsageError for a group that has the other policy."""
        limit = self.settings["max_instances_per_host"]
        if group is None:
            return PlanContext(max_instances_per_host=limit)
        name, policy = group
        state = groups.get(name)
        if state is None:
            members, revision = records.group_members(self.store, name)
            policies = {member["policy"] for member in members.values()}
            state = groups[name] = GroupState(
                Counter(member["host"] for member in members.values()), revision,
                policies.pop() if len(policies) == 1 else policy)
        if state.policy != policy:
            raise UsageError(f"group {name!r} has policy {state.policy}, not {policy}")
        return PlanContext(policy=policy, group_hosts=state.hosts, max_instances_per_host=limit,
                           group_max=group_max or 1)

    def _planned(self, request: Pending, picks: list[Pick],
                 group_revision: int | None) -> Planned | None:
        spec = request.spec
        assert spec is not None
        destinations = [
            Destination(uuid=uuid, name=spec.instance_name(index, uuid), host=pick.host.uuid,
                        host_name=pick.host.name, allocations=pick.allocations,
                        alternates=[{"host": host.uuid, "allocations": allocations}
                                    for host, allocations in pick.alternates])
            for index, (uuid, pick) in enumerate(zip(request.instances, picks, strict=True))]
        txn = self._transaction(request, destinations, group_revision)
        limit = self.settings["etcd_max_request_bytes"]
        if txn.size() > limit:
            for pick in picks:  # not claimed: give the capacity back to the batch
                pick.host.usage.release(pick.allocations)
            self._answer(request, UsageError(
                f"this request writes about {txn.size()} bytes to etcd in one transaction; "
                f"etcd allows {limit}"))
            return None
        return Planned(request, destinations, txn, group_revision)

    def _transaction(self, request: Pending, destinations: list[Destination],
                     group_revision: int | None) -> Txn:
        """The request's instances (specs stamped now), in the name of who asked."""
        assert request.spec is not None
        message = request.message or {}
        return spec_writer.transaction(self.keys, destinations, request.spec, self.settings,
                                       group_revision,
                                       message.get("requested_by") or message.get("client"))

    # --- etcd ---------------------------------------------------------------------------------

    def _chunks(self, planned: list[Planned]) -> list[list[Planned]]:
        """Requests grouped so each transaction stays within etcd's limits (+2 ops and +2
        compares per request for its answer, +1 compare for the fence)."""
        max_ops, max_bytes = self.settings["etcd_max_txn_ops"], \
            self.settings["etcd_max_request_bytes"]
        chunks: list[list[Planned]] = []
        ops = compares = size = 0
        for item in planned:
            more = (len(item.txn.success) + 2, len(item.txn.compare) + 2, item.txn.size() + 4096)
            if chunks and ops + more[0] <= max_ops and compares + more[1] <= max_ops - 1 \
                    and size + more[2] <= max_bytes:
                chunks[-1].append(item)
                ops, compares, size = ops + more[0], compares + more[1], size + more[2]
            else:
                chunks.append([item])
                ops, compares, size = more
        return chunks

    def _commit(self, answers: list[tuple[Pending, dict[str, Any]]],
                extra: Sequence[Txn] = (), removals: Sequence[Pending] = ()) -> int | None:
        """One fenced transaction: its revision, or None if a compare failed while we still
        lead."""
        if not self.is_leader():
            raise LostLeadership("no longer the leader")
        txn = Txn([self.fence()], [])
        lease = self.answer_lease() if answers else None
        for request, answer in answers:
            compare, ops = answer_ops(self.keys, request, answer, lease)
            txn = txn + Txn(compare, ops)
        for part in extra:
            txn = txn + part
        for request in removals:
            txn = txn + Txn([Compare(request.entry.key, "mod", "==", request.entry.mod_revision)],
                            [Delete(request.entry.key)])
        with self._timed("write"):
            written = self.store.commit(txn)
        if written is not None:
            return written
        if self.store.commit(Txn([self.fence()], [])) is None:
            raise LostLeadership("the leader key is no longer ours")
        return None

    def _answer(self, request: Pending, error: EtcdComputeError) -> None:
        self.stats["refused"] += 1
        if not self._commit([(request, answer_of(error, 1))]) and \
                self.store.get(self.keys.queue_answer(request.uuid)) is not None:
            # An answer of an earlier request with this uuid is still there: nobody can be
            # told; the request goes, or it would come back at every pass.
            LOG.warning("request %s removed unanswered: its uuid has an answer already",
                        request.uuid)
            self._commit([], removals=[request])
        self._forget(request.uuid)

    def _retry_later(self, request: Pending, why: str) -> None:
        self.attempts[request.uuid] += 1
        if self.attempts[request.uuid] > self.settings["claim_retries"]:
            self._answer(request, ConflictError(
                f"lost the race for capacity {self.attempts[request.uuid]} times "
                f"(last: {why}); try again", 409))
            return
        self.stats["retried"] += 1
        delay = min(1.0, 0.05 * 2 ** self.attempts[request.uuid]) * self.rng.random()
        self.not_before[request.uuid] = time.monotonic() + delay
        LOG.info("request %s: %s; trying again", request.uuid, why)

    def _forget(self, request_uuid: str) -> None:
        self.attempts.pop(request_uuid, None)
        self.not_before.pop(request_uuid, None)

    def _unclaim(self, consumers: list[str]) -> None:
        left = claims.unclaim(self.placement, consumers)
        if left:
            LOG.error("could not free the claims of %s; the next attempt frees them",
                      ", ".join(left))

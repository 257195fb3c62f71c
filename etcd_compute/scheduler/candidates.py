"""The scheduler service's allocation candidates: one query per request shape, reused while
young.

`GET /allocation_candidates` is most of Placement's work for a request (~30 ms at 100
providers, ~300 ms at 1000, whatever the `limit`). Under a steady stream of requests the
service asks it once per shape every `max_age` seconds, not once per pass: what it claimed
itself since is taken off the answer's free capacity (`ProviderUsage.take`), and what
others did meanwhile (another scheduler's claim, a host disabled
a moment ago) is what any answer that old would miss too. Placement's atomic claim keeps
capacity exact: a 409 drops every kept answer, and the next pass asks afresh.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Collection
from dataclasses import dataclass
from typing import Any

from etcd_compute.errors import PlacementError, ServiceUnavailable
from etcd_compute.placement import PlacementClient
from etcd_compute.scheduler import explain
from etcd_compute.scheduler.hoststate import Allocations
from etcd_compute.scheduler.request import ResourceRequest

EMPTY: dict[str, Any] = {"allocation_requests": [], "provider_summaries": {}}


def extra_params(root_required: Collection[str],
                 aggregates: list[str] | None = None) -> list[tuple[str, str]]:
    """What every candidates query of a scheduler adds to the request's own: the traits a
    host (its root provider) must have whatever the request (the network backend's,
    `Scheduler.host_traits`), and the shard aggregates asked about, if any."""
    extra = [("root_required", ",".join(sorted(root_required)))] if root_required else []
    if aggregates:
        extra.append(("member_of", "in:" + ",".join(aggregates)))
    return extra


@dataclass
class Answer:
    candidates: dict[str, Any]
    asked_at: float
    limit: int


class CandidateCache:
    """Placement's answers per request shape, and our claims since (not to be confused
    with `scheduler.Candidates`, one request's hosts as the direct path plans them)."""

    def __init__(self, placement: PlacementClient, max_age: float,
                 clock: Callable[[], float] = time.monotonic,
                 root_required: Collection[str] = ()):
        self.placement, self.max_age, self.clock = placement, max_age, clock
        self.root_required = root_required
        self._answers: dict[str, Answer] = {}
        # What we claimed, and when: taken off answers asked before it.
        self._claims: list[tuple[float, Allocations]] = []
        self.queries = self.reused = 0

    def get(self, request: ResourceRequest, limit: int,
            aggregates: list[str] | None = None) -> Answer:
        """An answer for `request` with at least `limit` candidates asked for, at most
        `max_age` old; asked of the hosts of these shard `aggregates` only, if given
        (`shards.py`). A trait nobody created is an empty answer, as Placement's 400 means."""
        shape, now = request.to_query(), self.clock()
        kept = self._answers.get(shape)
        if kept is not None and now - kept.asked_at <= self.max_age and (
                kept.limit >= limit or len(kept.candidates["allocation_requests"]) < kept.limit):
            self.reused += 1  # (an answer short of its limit had every candidate there was)
            return kept
        self.queries += 1
        try:
            extra = extra_params(self.root_required, aggregates)
            candidates = self.placement.allocation_candidates(
                request.to_query(limit=limit, extra=extra))
        except PlacementError as exc:
            if isinstance(exc, ServiceUnavailable) or not explain.unknown_trait(exc):
                raise
            candidates = EMPTY
        answer = self._answers[shape] = Answer(candidates, now, limit)
        self._prune(now)
        return answer

    def claimed(self, allocations: list[Allocations]) -> None:
        """Claims we made just now (every later pass on an older answer takes them off)."""
        now = self.clock()
        self._claims += [(now, a) for a in allocations]
        self._prune(now)

    @property
    def claims(self) -> list[tuple[float, Allocations]]:
        """(when, allocations) of our claims since the oldest answer kept was asked."""
        return list(self._claims)

    def forget(self) -> None:
        """A claim was refused: what we keep may be stale; ask afresh next time."""
        self._answers.clear()
        self._claims.clear()

    def _prune(self, now: float) -> None:
        self._answers = {s: a for s, a in self._answers.items()
                         if now - a.asked_at <= self.max_age}
        oldest = min((a.asked_at for a in self._answers.values()), default=now)
        self._claims = [(at, a) for at, a in self._claims if at >= oldest]

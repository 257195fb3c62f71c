"""Where the scheduler service's hosts come from, per request shape in a pass.

A plain `resources=` shape is planned on the hosts' own accounts of their capacity,
as the host cache keeps them from the watch (`hostview.py`): no Placement call at all
before the claim. Any other shape (traits, aggregates, trees, granular groups), or
every shape while some live host has no account, is planned on Placement's
candidates, kept briefly (`candidates.py`). Either way Placement's atomic claim
decides; a claim refused (`refused`) sends the rest of the pass to fresh candidates,
whatever the shape: an account that let us down is not asked again in that pass.

What the service claimed is taken off both: off the candidates asked before it
(`CandidateCache.claimed`), and off the accounts until they show it (`hostview.OwnClaims`,
by the revision the claim was written at: `written`).
"""

from __future__ import annotations

import random
from collections.abc import Callable, Iterable
from typing import Any

from etcd_compute.controller.hostcache import HostCache
from etcd_compute.placement import PlacementClient
from etcd_compute.scheduler import hostview
from etcd_compute.scheduler.candidates import CandidateCache
from etcd_compute.scheduler.hoststate import (
    Allocations,
    Cluster,
    HostState,
    ProviderUsage,
    host_states,
)
from etcd_compute.scheduler.hostview import HostView
from etcd_compute.scheduler.request import ResourceRequest

Shards = Callable[[ResourceRequest, int, Callable[[], int]], list[str] | None]


class Offers:
    def __init__(self, placement: PlacementClient, settings: dict[str, Any], cache: HostCache,
                 shards_for: Shards, rng: random.Random, host_traits: frozenset[str] = frozenset()):
        self.settings, self.cache, self.shards_for, self.rng = settings, cache, shards_for, rng
        # The traits every host must have (the network backend's: `Scheduler.host_traits`).
        self.host_traits = host_traits
        self.candidates = CandidateCache(placement, settings["service_candidates_max_age"],
                                         root_required=host_traits)
        self.own = hostview.OwnClaims()
        # Shapes planned on the accounts and on Placement's candidates (for the pass log).
        self.on_accounts = self.on_candidates = 0
        self._view: HostView | None = None
        self._refused = False

    def begin_pass(self) -> None:
        self._view, self._refused = None, False

    def hosts(self, request: ResourceRequest, instances: int, limit: int, cluster: Cluster,
              usage: ProviderUsage) -> list[HostState]:
        """The hosts a shape (`instances` of it in the pass) can be planned on, at most
        `limit`, their capacity in `usage` (the pass's)."""
        resources = hostview.plain_resources(request) \
            if self.settings["host_view"] and not self._refused else None
        if resources is not None:
            if self._view is None:
                self._view = self.cache.view()
            if self._view.usable:
                self.on_accounts += 1
                return self._view.host_states(resources, limit, self.rng,
                                              self.own.unseen(self._view.as_of()),
                                              self.host_traits, usage)
        self.on_candidates += 1
        aggregates = self.shards_for(request, instances, lambda: len(cluster.alive))
        answer = self.candidates.get(request, limit, aggregates)
        return host_states(answer.candidates, cluster, usage, answer.asked_at)

    @property
    def reused(self) -> int:
        """Answers reused (and plans made on the accounts): kept views that may be short."""
        return self.candidates.reused + self.on_accounts

    def claimed(self, allocations: list[Allocations]) -> None:
        self.candidates.claimed(allocations)

    def written(self, revision: int, placed: Iterable[tuple[str, Allocations]]) -> None:
        self.own.add(revision, placed)

    def refused(self) -> None:
        """A claim was refused, or a kept view ran out of room: fresh candidates for the
        rest of the pass."""
        self.candidates.forget()
        self._refused = True

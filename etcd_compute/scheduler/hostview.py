"""The hosts as they account for themselves in etcd: a plan without Placement's candidates.

`GET /allocation_candidates` is most of Placement's work for a request (~30 ms of its
CPU at 100 providers, ~300 ms at 1000). Every compute publishes its own account of
its capacity in its /stats/<rp> (`compute/capacity.py`: inventory, what the specs it
holds claim, its platform traits, the revision it is as of), so a plain query
(`resources=` alone) can be planned on one etcd read of heartbeats, stats and
disables (`hosts.view_ranges`), and the claim itself is Placement's capacity check:
a 409 sends the instance to the next alternate (`Scheduler._attempt_on_view`).

The view is used only when it can answer: the query names resources and nothing else
(traits, aggregates, trees and granular groups are Placement's to match), and every
live host has a readable account (else, say during an upgrade, some hosts would never
be offered). Otherwise, and when the view finds no room, the request goes the usual
way: Placement's candidates, and Placement's reasons when nothing fits.

An account lags its host's specs by a watch event and a write. A long-lived scheduler
adds its own claims written after the revision an account is as of (`OwnClaims`), so
a stream of requests from one client does not pile onto what the accounts do not
show yet; other schedulers' claims are what a 409 is for.
"""

from __future__ import annotations

import dataclasses
import logging
import math
import random
import time
from collections.abc import Callable, Collection, Iterable
from dataclasses import dataclass, field
from typing import Any

from etcd_compute.errors import ConflictError
from etcd_compute.etcd import KeyValueStore
from etcd_compute.hosts import capacity_of, decode_heartbeat, decode_stats, host_of, view_ranges
from etcd_compute.placement import DISABLED_TRAIT
from etcd_compute.scheduler.hoststate import (
    Allocations,
    Cluster,
    HostState,
    ProviderUsage,
    decode_some,
)
from etcd_compute.scheduler.planner import Pick
from etcd_compute.scheduler.request import ResourceRequest
from etcd_compute.scheduler.spec import Destination

LOG = logging.getLogger(__name__)

# How long a scheduler counts a claim of its own that no account shows yet (a host that
# never publishes it has died or been cut off: its heartbeat goes, or a 409 tells).
OWN_CLAIMS_SECONDS = 60.0
# How long a scheduler that found a live host without an account asks Placement instead.
LACKING_RECHECK_SECONDS = 10.0

Cache = dict[str, dict[tuple[str, int], dict[str, Any]]]


def plain_resources(request: ResourceRequest) -> dict[str, int] | None:
    """The resources of a query the view can answer (one unnumbered group of resources and
    nothing else), or None."""
    if set(request.groups) != {""} or request.group_policy:
        return None
    group = request.groups[""]
    if not group.resources or group.constraints():
        return None
    return dict(group.resources)


def capacity(inventory: dict[str, Any]) -> float:
    """What a resource class may hold in all, as Placement counts it."""
    return (inventory["total"] - inventory["reserved"]) * inventory["allocation_ratio"]


def accepts(inventory: dict[str, dict[str, Any]], resources: dict[str, int]) -> bool:
    """Whether one instance's amounts are allowed at all by the inventory's units (Placement
    offers no candidate otherwise)."""
    for rc, amount in resources.items():
        item = inventory.get(rc)
        if item is None or not item["min_unit"] <= amount <= item["max_unit"] or \
                amount % item["step_size"]:
            return False
    return True


@dataclass
class OwnClaims:
    """Claims this scheduler wrote, by the revision of their write, until the host's account
    shows them (it is as of that revision or later) or OWN_CLAIMS_SECONDS pass."""

    claims: list[tuple[int, float, str, dict[str, int]]] = field(default_factory=list)

    def add(self, revision: int, placed: Iterable[tuple[str, Allocations]]) -> None:
        now = time.monotonic()
        for host, allocations in placed:
            resources = allocations.get(host, {}).get("resources", {})
            self.claims.append((revision, now, host, dict(resources)))

    def unseen(self, as_of: dict[str, int]) -> list[tuple[str, dict[str, int]]]:
        """(host, resources) of the claims the accounts (`as_of` by host) do not show yet;
        the others are forgotten."""
        oldest = time.monotonic() - OWN_CLAIMS_SECONDS
        self.claims = [c for c in self.claims
                       if c[1] >= oldest and as_of.get(c[2], 0) < c[0]]
        return [(host, resources) for _, _, host, resources in self.claims]


@dataclass
class HostView:
    """Every live host's account (read at one revision), the hosts lacking one, and who is
    disabled by an operator."""

    accounts: dict[str, dict[str, Any]]
    lacking: set[str]
    cluster: Cluster
    disabled: set[str]
    revision: int

    @classmethod
    def read(cls, store: KeyValueStore, cache: Cache | None = None) -> HostView:
        """One round trip: heartbeats, stats and disables of every host. `cache`: messages
        already validated, by key and mod_revision (a long-lived scheduler's)."""
        cache = {} if cache is None else cache
        keys = store.keys
        (alive, stats, disabled), revision = store.read_many(view_ranges(keys))
        heartbeats = decode_some(decode_heartbeat, keys.alive_prefix(), alive.entries,
                                  None, cache)
        live = set(heartbeats)
        reports = decode_some(decode_stats, keys.stats_prefix(), stats.entries, live, cache)
        accounts = {rp: account for rp, s in reports.items()
                    if (account := capacity_of(s)) is not None}
        cluster = Cluster(
            {rp: message.get("name", rp) for rp, message in heartbeats.items()},
            {rp: s.get("build_failures", []) for rp, s in reports.items()})
        return cls(accounts, live - set(accounts), cluster,
                   {host_of(entry.key) for entry in disabled.entries}, revision)

    @property
    def usable(self) -> bool:
        """Every live host accounts for itself (and there is one)."""
        return bool(self.accounts) and not self.lacking

    def as_of(self) -> dict[str, int]:
        return {rp: account["as_of"] for rp, account in self.accounts.items()}

    def host_states(self, resources: dict[str, int], limit: int, rng: random.Random,
                    own: Iterable[tuple[str, dict[str, int]]] = (),
                    required: Collection[str] = (),
                    usage: ProviderUsage | None = None) -> list[HostState]:
        """The live hosts that can take one instance of `resources` now (after `own` claims
        not in their accounts yet), at most `limit` of them at random, as the planner sees
        hosts (Placement answers a limited query with a random few too); of those whose
        account has every trait `required` (the scheduler's network backend's). Their free
        capacity in `usage` (the scheduler service's, shared with its other request shapes:
        a host known to it already keeps what it has there) or a usage of their own."""
        pending: dict[str, list[dict[str, int]]] = {}
        for host, claimed in own:
            pending.setdefault(host, []).append(claimed)
        summaries, counts = {}, {}
        for rp, account in self.accounts.items():
            inventory = account["inventory"]
            if not accepts(inventory, resources) or \
                    not set(required) <= set(account.get("traits", ())):
                continue
            used = dict(account["used"])
            for claimed in pending.get(rp, ()):
                for rc, amount in claimed.items():
                    used[rc] = used.get(rc, 0) + amount
            summaries[rp] = {"resources": {
                rc: {"capacity": int(capacity(item)), "used": used.get(rc, 0)}
                for rc, item in inventory.items()}}
            counts[rp] = account["instances"] + len(pending.get(rp, ()))
        if usage is None:
            usage = ProviderUsage(summaries)
        else:  # (never taken off by the service's candidates: ours are counted above)
            usage.add(summaries, asked_at=math.inf)
        option = {rp: {rp: {"resources": dict(resources)}} for rp in summaries}
        fitting = [rp for rp in summaries if usage.fits(option[rp])]
        rng.shuffle(fitting)
        hosts = []
        for rp in fitting[:limit]:
            traits = set(self.accounts[rp].get("traits", []))
            if rp in self.disabled:
                traits.add(DISABLED_TRAIT)
            hosts.append(HostState(
                uuid=rp, name=self.cluster.alive.get(rp, rp), usage=usage,
                options=[option[rp]], traits=traits, tree={rp}, alive=True,
                instances=counts[rp],
                build_failures=list(self.cluster.build_failures.get(rp, []))))
        return hosts


def claim_somewhere(claim: Callable[[list[Destination]], None],
                    destinations: list[Destination], picks: list[Pick]
                    ) -> list[Destination] | None:
    """Claim a plan made on the accounts (`claim`: all at once, ConflictError if refused); one
    instance refused goes to its alternates in turn (an account may be behind). The
    destinations claimed, or None: nothing is held, Placement's candidates decide."""
    try:
        claim(destinations)
        return destinations
    except ConflictError as exc:
        if len(destinations) > 1:
            LOG.info("claim planned on the hosts' accounts refused (%s); asking Placement",
                     exc.code or exc)
            return None
    (first,), (pick,) = destinations, picks
    for index, (host, allocations) in enumerate(pick.alternates):
        moved = dataclasses.replace(first, host=host.uuid, host_name=host.name,
                                    allocations=allocations,
                                    alternates=first.alternates[index + 1:])
        try:
            claim([moved])
        except ConflictError:
            continue
        return [moved]
    LOG.info("claim planned on the hosts' accounts refused by %d host(s); asking Placement",
             1 + len(pick.alternates))
    return None

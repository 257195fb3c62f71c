"""Claims in Placement: take a whole plan at once, undo it, move one to another host.

One instance: `PUT /allocations/<uuid>`; several: one `POST /allocations`
carrying every consumer, which Placement applies atomically, so a request
for 50 instances either holds 50 claims or none. New consumers go with
consumer_generation null: Placement refuses (409) if the uuid already has
allocations, so a claim never silently overwrites another. A move replaces
a consumer's allocations in one request, checked against the generation we
read, so the instance never holds both hosts nor neither.

The scheduler claims and unclaims; the controller moves the claim of a
failed build to an alternate host. A move to another host (a migration) and a
resize held until confirmed keep what the instance held under a migration
consumer, as Nova does (`hold_source`: the instance's consumer holds the new
claim, the migration consumer the old one, one request); when it is done the
migration consumer goes (`release_hold`), when it is called off or reverted the
instance's consumer holds the old claim again (`revert_holding`).
A resize replaces the claim on the same host (`resize`, generation checked:
two racing resizes cannot both win, and no room is a 409); its undo (`undo`)
only replaces what it wrote itself, and a host whose resize failed puts back
the old size (`restore`) only if the claim still holds the new one.

Whoever claims and then writes etcd does it through `written_or_undone`: the write that
does not happen (a compare failed, or it raised: etcd unreachable, anything) takes its
claim back with it, so no error path leaves a claim nobody will free.

What a host may act on is one check, `holding`: the consumer's claim on that host
alone, with exactly the amounts asked, per resource class. Every build, resumed
build and action asks it before anything of the guest is defined, and a host frees
only a claim that is on it alone (`free_here`): never another host's.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar

from etcd_compute.errors import ConflictError, EtcdComputeError, NotFound
from etcd_compute.placement import PlacementClient

LOG = logging.getLogger("etcd_compute.claims")
Written = TypeVar("Written")


def claim(placement: PlacementClient, allocations_by_consumer: dict[str, dict[str, Any]],
          settings: dict[str, Any],
          owners: dict[str, tuple[str, str]] | None = None) -> None:
    """Claim {consumer: allocations} atomically; ConflictError on a race or lack of room.

    Each consumer belongs to the (project, user) `owners` gives it (the API's requests:
    the asking user's), else to `scheduler.project_id`/`user_id` (the operator's)."""
    owners = owners or {}
    default = (settings["project_id"], settings["user_id"])
    if len(allocations_by_consumer) == 1:
        ((consumer, allocations),) = allocations_by_consumer.items()
        project, user = owners.get(consumer, default)
        placement.claim(consumer, allocations, project, user,
                        consumer_type=settings["consumer_type"], consumer_generation=None)
    else:
        placement.claim_many(allocations_by_consumer, *default,
                             consumer_type=settings["consumer_type"], owners=owners)


def unclaim(placement: PlacementClient, consumers: list[str]) -> list[str]:
    """Delete the consumers' allocations; the ones we could not delete (best effort)."""
    left = []
    for consumer in consumers:
        try:
            placement.delete_allocations(consumer)
        except EtcdComputeError:
            left.append(consumer)
    return left


def move(placement: PlacementClient, consumer: str, allocations: dict[str, Any],
         project_id: str, user_id: str) -> int | None:
    """Replace `consumer`'s allocations with `allocations` in one request (generation checked).

    Returns the consumer's generation after the move, for `undo_move`. ConflictError when
    the new host has no room or the consumer changed meanwhile.
    """
    current = placement.get_allocations(consumer)
    placement.claim(consumer, allocations, project_id, user_id,
                    consumer_generation=current.get("consumer_generation"))
    return placement.get_allocations(consumer).get("consumer_generation")


def move_many(placement: PlacementClient,
              moves: list[tuple[str, dict[str, Any], str, str]]) -> dict[str, int | None]:
    """Move several claims at once: (consumer, allocations, project_id, user_id) each, in one
    atomic request, each checked against the generation read here. The consumers'
    generations after the move, for `undo_move`. ConflictError (nothing moved) when a new
    host has no room or a consumer changed meanwhile."""
    current = {consumer: placement.get_allocations(consumer) for consumer, *_ in moves}
    placement.replace_many({
        consumer: {"allocations": allocations, "project_id": project_id, "user_id": user_id,
                   "consumer_generation": current[consumer].get("consumer_generation")}
        for consumer, allocations, project_id, user_id in moves})
    return {consumer: placement.get_allocations(consumer).get("consumer_generation")
            for consumer, *_ in moves}


def written_or_undone(write: Callable[[], Written | None],
                      undo: Callable[[], object]) -> Written | None:
    """The etcd side of a claim just made: `write()`'s result; when it wrote nothing (None:
    a compare failed) or raised, `undo()` first, so the claim never outlives the write it
    was for. An undo that itself fails is logged and the write's own error raised.

    A write that raised may have been applied all the same (etcd's answer lost): the claim
    is undone then too, and the host's check before it acts (`holding`) refuses the
    instance, where a claim kept for a write that never happened would be held forever."""
    try:
        written = write()
    except BaseException:
        _undo(undo)
        raise
    if written is None:
        _undo(undo)
    return written


def _undo(undo: Callable[[], object]) -> None:
    try:
        undo()
    except EtcdComputeError as exc:
        LOG.error("a claim whose etcd write did not happen could not be undone: %s", exc)


def undo_move(placement: PlacementClient, consumer: str, allocations: dict[str, Any],
              generation: int | None, project_id: str, user_id: str) -> bool:
    """Set the claim back to `allocations` (`{}`: none) after a move whose etcd side failed,
    only if nobody touched it since the move (`generation`): a destroy that freed it, or
    another move, wins. False if it was left as it is."""
    try:
        placement.replace_allocations(consumer, allocations, generation, project_id, user_id)
    except ConflictError:
        return False
    return True


# What a consumer's claim is, seen from one host (`judge`).
HELD = "held"  # on this host alone, exactly the amounts asked
MISSING = "missing"  # Placement holds nothing for it
OTHER_HOST = "other_host"  # all of it on other hosts
SPLIT = "split"  # part on this host, part on others
DIFFERENT = "different"  # on this host alone, other amounts


@dataclass(frozen=True)
class Holding:
    """What Placement holds for a consumer, judged for one host and the amounts it needs."""

    verdict: str
    host: str
    wanted: dict[str, int]
    allocations: dict[str, Any]

    @property
    def held(self) -> bool:
        return self.verdict == HELD

    @property
    def elsewhere(self) -> str:
        """The other providers holding (part of) it, comma-separated."""
        return ", ".join(sorted(set(self.allocations) - {self.host}))

    def why(self) -> str:
        """Why the host may not act on it, in one line ("" when it may)."""
        if self.verdict == MISSING:
            return "Placement holds no claim for this instance"
        if self.verdict == OTHER_HOST:
            return f"the instance is claimed on {self.elsewhere}, not on this host"
        if self.verdict == SPLIT:
            return (f"the claim is split between this host "
                    f"({describe(self.allocations[self.host]['resources'])}) and "
                    f"{self.elsewhere}: an instance's claim is on its host alone")
        if self.verdict == DIFFERENT:
            return (f"the spec asks for {describe(self.wanted)} but Placement holds "
                    f"{describe(self.allocations[self.host]['resources'])} for it here")
        return ""


def judge(allocations: dict[str, Any], host: str, wanted: dict[str, int]) -> Holding:
    """The one rule: `host` may act on a claim only if it holds all of it, and it is
    exactly `wanted` (a claim that merely covers `wanted` is not it)."""
    if not allocations:
        verdict = MISSING
    elif host not in allocations:
        verdict = OTHER_HOST
    elif not alone_on(allocations, host):
        verdict = SPLIT
    elif dict(allocations[host]["resources"]) != dict(wanted):
        verdict = DIFFERENT
    else:
        verdict = HELD
    return Holding(verdict, host, dict(wanted), allocations)


def alone_on(allocations: dict[str, Any], host: str) -> bool:
    """All of the claim is on `host` (and there is one)."""
    return set(allocations) == {host}


def holding(placement: PlacementClient, consumer: str, host: str,
            wanted: dict[str, int]) -> Holding:
    """What Placement holds for `consumer`, judged for `host` and `wanted` (one GET)."""
    return judge(placement.get_allocations(consumer).get("allocations") or {}, host, wanted)


def free_here(placement: PlacementClient, consumer: str, host: str) -> bool:
    """Free `consumer`'s claim if it is on `host` alone (whatever its amounts), checked
    against the generation read: a claim moved or split meanwhile is never freed by a host
    that does not hold all of it. False if nothing was freed."""
    current = placement.get_allocations(consumer)
    if not alone_on(current.get("allocations") or {}, host):
        return False
    try:
        placement.replace_allocations(consumer, {}, current.get("consumer_generation"),
                                      current["project_id"], current["user_id"])
    except (ConflictError, NotFound):
        return False
    return True


def totals(allocations: dict[str, Any]) -> dict[str, int]:
    """What `allocations` ({rp: {"resources": ...}}) claim in all, per resource class."""
    found: dict[str, int] = {}
    for allocation in allocations.values():
        for rc, amount in allocation["resources"].items():
            found[rc] = found.get(rc, 0) + amount
    return found


def describe(resources: dict[str, int] | None) -> str:
    """VCPU:1,... or "nothing"."""
    if not resources:
        return "nothing"
    return ",".join(f"{rc}:{n}" for rc, n in sorted(resources.items()))


# A resize's claim is not (all) on the instance's host: nothing to resize there.
ELSEWHERE = "etcd_compute.claim_elsewhere"


def resize(placement: PlacementClient, consumer: str, host: str,
           resources: dict[str, int]) -> tuple[dict[str, Any], int]:
    """Replace `consumer`'s claim, all of it on `host`, with `resources` on `host`, in one
    request checked against the consumer generation read first. Returns (the allocations
    it replaced, the consumer generation after our write) for `undo`. ConflictError: with
    code ELSEWHERE when the claim is not on `host` alone; a generation conflict when it
    changed meanwhile (try again); Placement's own when there is no room."""
    current = placement.get_allocations(consumer)
    allocations = current.get("allocations") or {}
    if not alone_on(allocations, host):
        raise ConflictError(f"the claim of {consumer} is not on its host {host} "
                            f"({', '.join(sorted(allocations)) or 'none'})", 409, ELSEWHERE)
    generation = current.get("consumer_generation")
    placement.claim(consumer, {host: {"resources": resources}}, current["project_id"],
                    current["user_id"], consumer_generation=generation)
    return {host: {"resources": allocations[host]["resources"]}}, (generation or 0) + 1


def undo(placement: PlacementClient, consumer: str, allocations: dict[str, Any],
         generation: int) -> bool:
    """Put `allocations` back if the consumer is still at `generation` (nobody wrote after
    us); False when someone did (their claim stands)."""
    current = placement.get_allocations(consumer)
    if current.get("consumer_generation") != generation:
        return False
    try:
        placement.claim(consumer, allocations, current["project_id"], current["user_id"],
                        consumer_generation=generation)
    except (ConflictError, NotFound):
        return False
    return True


def restore(placement: PlacementClient, consumer: str, host: str, held: dict[str, int],
            allocations: dict[str, Any], hold: str | None = None) -> bool:
    """If the consumer's claim is `held` on `host` alone (`judge`), replace it with
    `allocations` (generation checked), freeing the resize's `hold` in the same request if
    one was taken; False if it is anything else or changed meanwhile (a hold is freed then
    all the same: the resize it held for failed)."""
    current = placement.get_allocations(consumer)
    if not judge(current.get("allocations") or {}, host, held).held:
        if hold is not None:
            release_hold(placement, hold)
        return False
    generation = current.get("consumer_generation")
    try:
        if hold is None:
            placement.claim(consumer, allocations, current["project_id"], current["user_id"],
                            consumer_generation=generation)
        else:
            placement.replace_many({
                consumer: {"allocations": allocations, "project_id": current["project_id"],
                           "user_id": current["user_id"], "consumer_generation": generation},
                **_freed(placement, hold)})
    except (ConflictError, NotFound):
        if hold is not None:
            release_hold(placement, hold)
        return False
    return True


# --- the old claim held by a migration consumer (Nova's): a move, a held resize ---------------

# The consumer type of a held old claim: Nova's, so usage per project counts it apart from
# the instances (consumer_type INSTANCE) that quotas count.
MIGRATION = "MIGRATION"


def hold_source(placement: PlacementClient, consumer: str, hold: str,
                allocations: dict[str, Any], host: str | None = None
                ) -> tuple[dict[str, Any], int]:
    """One POST /allocations: `consumer` now holds `allocations` (its generation checked)
    and the new migration consumer `hold` (its project and user) what `consumer` held: a
    move's source while the instance holds the destination, a resize's old size while it
    holds the new one, until it is done or called off. `host`: the claim must be on it
    alone (ConflictError with code ELSEWHERE otherwise). Returns (the old allocations,
    `consumer`'s generation after the write) for `undo_holding`. ConflictError: nothing
    changed (no room, or the claim changed meanwhile); NotFound if it holds nothing."""
    current = placement.get_allocations(consumer)
    held = _bare(current.get("allocations") or {})
    if host is not None and not alone_on(held, host):
        raise ConflictError(f"the claim of {consumer} is not on its host {host} "
                            f"({', '.join(sorted(held)) or 'none'})", 409, ELSEWHERE)
    if not held:
        raise NotFound(f"instance {consumer} holds no claim in Placement")
    generation = current.get("consumer_generation")
    owner = {"project_id": current["project_id"], "user_id": current["user_id"]}
    placement.replace_many({
        consumer: {"allocations": allocations, **owner, "consumer_generation": generation},
        hold: {"allocations": held, **owner, "consumer_generation": None,
               "consumer_type": MIGRATION}})
    return held, (generation or 0) + 1


def resize_holding(placement: PlacementClient, consumer: str, host: str,
                   resources: dict[str, int], hold: str) -> tuple[dict[str, Any], int]:
    """A resize whose old size stays held (`hold_source` with the new size on `host`, the
    claim there alone); the host must have room for both."""
    return hold_source(placement, consumer, hold, {host: {"resources": resources}}, host)


def undo_holding(placement: PlacementClient, consumer: str, allocations: dict[str, Any],
                 generation: int, hold: str) -> bool:
    """Undo `resize_holding` whose etcd write failed: `allocations` back on `consumer` and
    the hold freed, in one request, if nobody wrote `consumer` since us (`generation`);
    False when someone did (their claim stands; the hold is freed all the same)."""
    current = placement.get_allocations(consumer)
    if current.get("consumer_generation") != generation:
        release_hold(placement, hold)
        return False
    try:
        placement.replace_many({
            consumer: {"allocations": allocations, "project_id": current["project_id"],
                       "user_id": current["user_id"], "consumer_generation": generation},
            **_freed(placement, hold)})
    except (ConflictError, NotFound):
        release_hold(placement, hold)
        return False
    return True


def revert_holding(placement: PlacementClient, consumer: str, hold: str,
                   allocations: dict[str, Any] | None = None) -> int:
    """A move called off or a resize reverted: `consumer` gets the held claim back (the
    `allocations` given, else what `hold` holds) and the hold is freed, in one request
    checked against both generations (Nova moves the migration's allocations back to the
    instance). Returns `consumer`'s generation after it. ConflictError if either changed
    meanwhile, or there is no room (a hold already freed leaves the old claim to be taken
    anew); NotFound if nothing is given and `hold` holds nothing."""
    held = placement.get_allocations(hold)
    if allocations is None:
        if not held.get("allocations"):
            raise NotFound(f"migration consumer {hold} holds nothing")
        allocations = _bare(held["allocations"])
    freed = _freed(placement, hold, held)
    current = placement.get_allocations(consumer)
    generation = current.get("consumer_generation")
    owner_of = current if "project_id" in current else held  # a claim gone: the hold's
    owner = {"project_id": owner_of.get("project_id"), "user_id": owner_of.get("user_id")}
    placement.replace_many({
        consumer: {"allocations": allocations, **owner, "consumer_generation": generation},
        **freed})
    return (generation or 0) + 1


def release_hold(placement: PlacementClient, hold: str) -> bool:
    """A move done, a resize confirmed (or its instance destroyed): free the old claim the
    migration consumer held; False if nothing was held any more."""
    return placement.delete_allocations(hold)


def _freed(placement: PlacementClient, hold: str, current: dict[str, Any] | None = None
           ) -> dict[str, dict[str, Any]]:
    """`hold` with no allocations, at its generation read now or in `current` (nothing if
    none is held)."""
    current = placement.get_allocations(hold) if current is None else current
    if not current.get("allocations"):
        return {}
    return {hold: {"allocations": {}, "project_id": current["project_id"],
                   "user_id": current["user_id"],
                   "consumer_generation": current.get("consumer_generation"),
                   "consumer_type": MIGRATION}}


def _bare(allocations: dict[str, Any]) -> dict[str, Any]:
    """{rp: {"resources": ...}} of what Placement answered (its generations left out)."""
    return {rp: {"resources": dict(held["resources"])} for rp, held in allocations.items()}

"""Claims in Placement: take a whole plan at once, undo it, move one to another host.

One instance: `PUT /allocations/<uuid>`; several: one `POST /allocations`
carrying every consumer, which Placement applies atomically, so a request
for 50 instances either holds 50 claims or none. New consumers go with
consumer_generation null: Placement refuses (409) if the uuid already has
allocations, so a claim never silently overwrites another. A move replaces
a consumer's allocations in one request, checked against the generation we
read, so the instance never holds both hosts nor neither.

The scheduler claims and unclaims; the controller moves the claim of a
failed build to an alternate host. A resize replaces the claim on the same
host (`resize`, generation checked: two racing resizes cannot both win, and
no room is a 409); its undo (`undo`) only replaces what it wrote itself, and
a host whose resize failed puts back the old size (`restore`) only if the
claim still holds the new one.
"""

from __future__ import annotations

from typing import Any

from etcd_compute.errors import ConflictError, EtcdComputeError, NotFound
from etcd_compute.placement import PlacementClient


def claim(placement: PlacementClient, allocations_by_consumer: dict[str, dict[str, Any]],
          settings: dict[str, Any]) -> None:
    """Claim {consumer: allocations} atomically; ConflictError on a race or lack of room."""
    ids = {"project_id": settings["project_id"], "user_id": settings["user_id"],
           "consumer_type": settings["consumer_type"]}
    if len(allocations_by_consumer) == 1:
        ((consumer, allocations),) = allocations_by_consumer.items()
        placement.claim(consumer, allocations, consumer_generation=None, **ids)
    else:
        placement.claim_many(allocations_by_consumer, **ids)


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


def totals(allocations: dict[str, Any]) -> dict[str, int]:
    """What `allocations` ({rp: {"resources": ...}}) claim in all, per resource class."""
    found: dict[str, int] = {}
    for allocation in allocations.values():
        for rc, amount in allocation["resources"].items():
            found[rc] = found.get(rc, 0) + amount
    return found


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
    if set(allocations) != {host}:
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


def restore(placement: PlacementClient, consumer: str, held: dict[str, int],
            allocations: dict[str, Any]) -> bool:
    """If the consumer's claim holds `held` in all, replace it with `allocations`
    (generation checked); False if it holds anything else or changed meanwhile."""
    current = placement.get_allocations(consumer)
    if totals(current.get("allocations") or {}) != held:
        return False
    try:
        placement.claim(consumer, allocations, current["project_id"], current["user_id"],
                        consumer_generation=current.get("consumer_generation"))
    except (ConflictError, NotFound):
        return False
    return True

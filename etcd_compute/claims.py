"""Claims in Placement: take a whole plan at once, undo it, move one to another host.

One instance: `PUT /allocations/<uuid>`; several: one `POST /allocations`
carrying every consumer, which Placement applies atomically, so a request
for 50 instances either holds 50 claims or none. New consumers go with
consumer_generation null: Placement refuses (409) if the uuid already has
allocations, so a claim never silently overwrites another. A move replaces
a consumer's allocations in one request, checked against the generation we
read, so the instance never holds both hosts nor neither.

The scheduler claims and unclaims; a compute host moves the claim of a
failed build to an alternate host.
"""

from __future__ import annotations

from typing import Any

from etcd_compute.errors import ConflictError, EtcdComputeError
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

"""Claim a whole plan in Placement at once, and undo it.

One instance: `PUT /allocations/<uuid>`; several: one `POST /allocations`
carrying every consumer, which Placement applies atomically, so a request
for 50 instances either holds 50 claims or none. New consumers go with
consumer_generation null: Placement refuses (409) if the uuid already has
allocations, so a claim never silently overwrites another.
"""

from __future__ import annotations

from typing import Any

from etcd_compute.errors import EtcdComputeError
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

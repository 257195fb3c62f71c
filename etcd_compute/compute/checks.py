"""Verify before acting: a host builds only what Placement says it holds the claim for.

Whoever can write a spec to a host's key is not trusted to have claimed
capacity: a spec written straight to etcd would bypass it, and a spec for
an instance claimed on another host would build it twice. Placement's
allocations for the consumer are the proof.
"""

from __future__ import annotations

import logging
from typing import Any

from etcd_compute.etcd import KeyValueStore
from etcd_compute.instances import host as host_txn
from etcd_compute.instances import ownership
from etcd_compute.placement import PlacementClient

LOG = logging.getLogger("etcd_compute.compute")


def claimed_here(placement: PlacementClient, rp_uuid: str, uuid: str) -> dict[str, Any] | None:
    """The consumer's allocations if Placement holds them on this host's provider."""
    allocations = placement.get_allocations(uuid).get("allocations") or {}
    return allocations if rp_uuid in allocations else None


def claimed_totals(placement: PlacementClient, rp_uuid: str, uuid: str) -> dict[str, int] | None:
    """What Placement holds for the consumer, if all of it is on this host's provider."""
    allocations = placement.get_allocations(uuid).get("allocations") or {}
    if set(allocations) != {rp_uuid}:
        return None
    return dict(allocations[rp_uuid]["resources"])


# What check_claim decides.
BUILD, REFUSED, LATER = "build", "refused", "later"


def check_claim(store: KeyValueStore, placement: PlacementClient, spec: dict[str, Any],
                spec_revision: int, placed_here: bool) -> str:
    """BUILD if Placement holds the spec's claim here; else the spec is dealt with.

    A spec with no claim ends in ERROR (REFUSED); one whose resources differ from its
    claim ends in ERROR with the claim freed (REFUSED). One claimed on another host is a
    stray copy, dropped with no record here (REFUSED), unless our record says the
    instance was placed here (`placed_here`): then the controller is moving it (it moves
    the claim first, then spec and record, and puts the claim back if that fails), so
    LATER: look again shortly.
    """
    uuid, host = spec["uuid"], spec["host"]
    log = logging.LoggerAdapter(LOG, {"instance": uuid})
    allocations = placement.get_allocations(uuid).get("allocations") or {}
    if not allocations:
        reason = "refused: Placement holds no claim for this instance"
    elif host not in allocations and placed_here:
        log.info("claimed on %s for now (a move in flight?); looking again shortly",
                 ", ".join(sorted(allocations)))
        return LATER
    elif host not in allocations:
        log.error("refused: the instance is claimed on %s, not on this host; spec %s dropped",
                  ", ".join(sorted(allocations)), store.keys.spec(host, uuid))
        ownership.drop_key(store, store.keys.spec(host, uuid), spec_revision)
        return REFUSED
    else:
        claimed: dict[str, int] = {}
        for allocation in allocations.values():
            for rc, amount in allocation["resources"].items():
                claimed[rc] = claimed.get(rc, 0) + amount
        if claimed == spec["resources"]:
            return BUILD
        reason = (f"refused: the spec asks for {describe_resources(spec['resources'])} but the "
                  f"claim holds {describe_resources(claimed)}")
        placement.delete_allocations(uuid)
    log.error("%s", reason)
    host_txn.reject(store, host, uuid, spec_revision, reason)
    return REFUSED


def describe_resources(resources: dict[str, int] | None) -> str:
    """VCPU:1,... or "nothing"."""
    if not resources:
        return "nothing"
    return ",".join(f"{rc}:{n}" for rc, n in sorted(resources.items()))

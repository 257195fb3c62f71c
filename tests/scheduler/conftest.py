"""Scheduler test helpers: simulated hosts (providers + heartbeat keys), schedule.py runs."""

from __future__ import annotations

import time
import uuid as uuidlib
from typing import Any

from etcd_compute import messages
from etcd_compute.etcd import Store
from etcd_compute.placement import PlacementClient

SMALL = {"VCPU": 4, "MEMORY_MB": 2048, "DISK_GB": 20}


def inventory(totals: dict[str, int]) -> dict[str, dict[str, Any]]:
    return {rc: {"total": total, "reserved": 0, "allocation_ratio": 1.0}
            for rc, total in totals.items()}


def add_host(placement: PlacementClient, store: Store | None, name: str,
             totals: dict[str, int] | None = None, traits: set[str] | None = None,
             aggregates: list[str] | None = None, alive: bool = True) -> str:
    """A simulated compute host: a provider with inventory, and (if alive) a heartbeat key."""
    uuid = str(uuidlib.uuid4())
    placement.ensure_provider(uuid, name)
    placement.set_inventory(uuid, inventory(totals or SMALL))
    if traits:
        placement.set_traits(uuid, traits)
    if aggregates:
        placement.set_aggregates(uuid, aggregates)
    if alive and store is not None:
        store.put(messages.ALIVE, store.keys.alive(uuid),
                  {"host": uuid, "name": name, "since": time.time()})
    return uuid

"""Scheduler test helpers: simulated hosts (providers + heartbeat keys), schedule.py runs, a
multi-worker Placement on PostgreSQL."""

from __future__ import annotations

import time
import uuid as uuidlib
from collections.abc import Iterator
from typing import Any

import pytest

from etcd_compute import messages
from etcd_compute.errors import ServiceUnavailable
from etcd_compute.etcd import Store
from etcd_compute.network_backend import LIBVIRT, trait_of
from etcd_compute.placement import PlacementClient
from tests.conftest import unavailable
from tools.local_services import PlacementServer, PostgresServer

SMALL = {"VCPU": 4, "MEMORY_MB": 2048, "DISK_GB": 20}


def inventory(totals: dict[str, int]) -> dict[str, dict[str, Any]]:
    return {rc: {"total": total, "reserved": 0, "allocation_ratio": 1.0}
            for rc, total in totals.items()}


def add_host(placement: PlacementClient, store: Store | None, name: str,
             totals: dict[str, int] | None = None, traits: set[str] | None = None,
             aggregates: list[str] | None = None, alive: bool = True) -> str:
    """A simulated compute host: a provider with inventory and traits (a libvirt host's), and
    (if alive) a heartbeat key."""
    uuid = str(uuidlib.uuid4())
    placement.ensure_provider(uuid, name)
    placement.set_inventory(uuid, inventory(totals or SMALL))
    # As a compute registers: its network backend's trait (the schedulers' is the default's).
    own = {trait_of(LIBVIRT)} | (traits or set())
    placement.ensure_custom_traits({t for t in own if t.startswith("CUSTOM_")})
    placement.set_traits(uuid, own)
    if aggregates:
        placement.set_aggregates(uuid, aggregates)
    if alive and store is not None:
        store.put(messages.ALIVE, store.keys.alive(uuid),
                  {"host": uuid, "name": name, "since": time.time()})
    return uuid


@pytest.fixture(scope="module")
def pg_placement(tmp_path_factory: pytest.TempPathFactory) -> Iterator[PlacementServer]:
    run_dir = tmp_path_factory.mktemp("pg-placement")
    postgres = PostgresServer.create(run_dir)
    server: PlacementServer | None = None
    try:  # both stopped even when a start fails or is cut short (a timeout, Ctrl-C)
        try:
            postgres.start()
            server = PlacementServer.create(run_dir, db_url=postgres.url, workers=4)
            server.start()
        except ServiceUnavailable as exc:
            unavailable(str(exc))
        yield server
    finally:
        if server is not None:
            server.stop()
        postgres.stop()

"""Scheduler test helpers: simulated hosts (providers + heartbeat keys), schedule.py runs."""

from __future__ import annotations

import json
import subprocess
import sys
import time
import uuid as uuidlib
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from etcd_compute import messages
from etcd_compute.etcd import Store
from etcd_compute.placement import PlacementClient

REPO = Path(__file__).resolve().parents[2]

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


@dataclass
class Run:
    code: int
    stdout: str
    stderr: str

    def json(self) -> Any:
        return json.loads(self.stdout)


@pytest.fixture
def schedule_yaml(schedule_config: dict[str, Any],
                  write_yaml: Callable[[str, dict[str, Any]], Path]) -> Path:
    return write_yaml("schedule.yaml", schedule_config)


@pytest.fixture
def run_schedule(schedule_yaml: Path) -> Callable[..., Run]:
    """Run the real schedule.py with the test's schedule.yaml."""

    def run(*args: str, config: Path | None = None, timeout: float = 60) -> Run:
        argv = [sys.executable, str(REPO / "schedule.py"), "--config",
                str(config or schedule_yaml), *args]
        done = subprocess.run(argv, capture_output=True, text=True, timeout=timeout, cwd=REPO)
        return Run(done.returncode, done.stdout, done.stderr)

    return run

"""Self-fencing: the gate closes, the pool stops, every guest goes off; lifting reopens."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from etcd_compute.compute.fencing import Fencer, Gate
from etcd_compute.config import deep_merge
from etcd_compute.defaults import COMPUTE_DEFAULTS
from etcd_compute.drivers.fake import FakeDriver
from tests.support import make_spec
from tests.unit.fakes import FakePool


class StoppablePool(FakePool):
    def __init__(self) -> None:
        super().__init__()
        self.events: list[str] = []

    def stop(self, join_timeout: float = 5) -> None:
        self.events.append(f"stop {join_timeout}")

    def start(self) -> StoppablePool:
        self.events.append("start")
        return self


def config(tmp_path: Path) -> dict[str, Any]:
    return deep_merge(COMPUTE_DEFAULTS, {
        "compute": {"uuid": "11111111-1111-4111-8111-111111111111", "name": "h",
                    "state_dir": str(tmp_path), "instances_dir": str(tmp_path / "i")},
        "driver": {"name": "fake"}})


def test_a_fence_closes_the_gate_stops_the_pool_and_powers_every_guest_off(tmp_path):
    settings = config(tmp_path)
    driver = FakeDriver(settings)
    running = [driver.build(make_spec(settings["compute"]["uuid"]))["ip"] for _ in range(2)]
    assert len(driver.running()) == len(running)
    pool, gate = StoppablePool(), Gate()
    stopped = Fencer(settings, pool, gate).fence()
    assert gate.closed and pool.events == ["stop 0"]
    assert len(stopped) == 2 and driver.running() == set()
    assert driver.list_instances() == set(stopped)  # powered off, not destroyed
    assert (tmp_path / "fake-instances" / "builds.log").read_text().count(" fence ") == 1


def test_lifting_reopens_the_gate_and_the_pool_once(tmp_path):
    pool, gate = StoppablePool(), Gate()
    fencer = Fencer(config(tmp_path), pool, gate)
    fencer.lift()
    assert pool.events == []  # not fenced: nothing to lift
    fencer.fence()
    fencer.lift()
    fencer.lift()
    assert not gate.closed and pool.events == ["stop 0", "start"]

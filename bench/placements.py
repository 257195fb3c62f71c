"""What every variant returns: per-instance placements, latencies and counters."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any


@dataclass
class Placed:
    """One instance: where it went and the claim, as the scheduler (or baseline) made it."""

    uuid: str
    host: str
    allocations: dict[str, Any]


@dataclass
class RunResult:
    """One scheduler run (one process): what it placed and how long each instance took."""

    placed: list[Placed] = field(default_factory=list)
    # Seconds from the call that placed the instance starting to it returning
    # (a --count batch: every instance of the batch gets the batch's latency).
    latencies: list[float] = field(default_factory=list)
    conflicts: int = 0  # 409s Placement answered
    retries: int = 0  # times an instance (or batch) was tried again after a 409
    cpu_seconds: float = 0.0  # CPU time of the scheduling process(es)
    service_cpu_seconds: float = 0.0  # of `schedule.py serve`, when one ran the variant
    wall_seconds: float = 0.0
    errors: list[str] = field(default_factory=list)
    # time.time() just before each instance was asked for (the API clients: create ->
    # BUILDING is measured from it).
    started_at: dict[str, float] = field(default_factory=dict)

    def merge(self, other: RunResult) -> None:
        self.placed += other.placed
        self.latencies += other.latencies
        self.conflicts += other.conflicts
        self.retries += other.retries
        self.cpu_seconds += other.cpu_seconds
        self.service_cpu_seconds += other.service_cpu_seconds
        self.errors += other.errors
        self.started_at.update(other.started_at)

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)

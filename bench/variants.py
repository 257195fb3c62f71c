"""The scheduling variants of the report, each a function of (config, count) -> RunResult.

(a) baseline, one process            (b) ours, one instance per call
(c) ours, --count batches            (d) ours, 8 processes at once
(e) baseline, 8 processes at once
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from bench import baseline, ours, parallel
from bench.placements import RunResult

QUERY = "resources=VCPU:1,MEMORY_MB:256,DISK_GB:1"


@dataclass(frozen=True)
class Variant:
    key: str
    title: str
    run: Callable[[dict[str, Any], int], RunResult]


def shares(count: int, processes: int) -> list[int]:
    """`count` split over `processes` as evenly as possible."""
    return [count // processes + (i < count % processes) for i in range(processes)]


def concurrent(function: Callable[..., RunResult], processes: int,
               **kwargs: Any) -> Callable[[dict[str, Any], int], RunResult]:
    def run(config: dict[str, Any], count: int) -> RunResult:
        split = shares(count, processes)
        return parallel.run(processes, function,
                            lambda i: (config, split[i], QUERY, *kwargs.values()),
                            timeout=3600)
    return run


def all_variants(batch: int, processes: int, profile_dir: str | None) -> list[Variant]:
    def prof(name: str) -> str | None:
        return f"{profile_dir}/{name}.txt" if profile_dir else None

    return [
        Variant("a", "baseline, sequential",
                lambda config, n: baseline.run(config, n, QUERY)),
        Variant("b", "ours, one per call",
                lambda config, n: ours.run(config, n, QUERY, 1, prof("ours-b"))),
        Variant("c", f"ours, --count {batch}",
                lambda config, n: ours.run(config, n, QUERY, batch, prof("ours-c"))),
        Variant("d", f"ours, {processes} processes",
                concurrent(ours.run, processes, batch=1)),
        Variant("e", f"baseline, {processes} processes",
                concurrent(baseline.run, processes)),
    ]

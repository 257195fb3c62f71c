"""Percentiles and the per-variant summary the report shows."""

from __future__ import annotations

from typing import Any

from bench.placements import RunResult


def percentile(values: list[float], q: float) -> float | None:
    """The q-th percentile (0..100), linear between closest ranks; None when empty."""
    if not values:
        return None
    ordered = sorted(values)
    rank = (len(ordered) - 1) * q / 100
    low = int(rank)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (rank - low)


def summarize(result: RunResult) -> dict[str, Any]:
    placed = len(result.placed)
    return {
        "instances": placed,
        "wall_seconds": result.wall_seconds,
        "instances_per_second": placed / result.wall_seconds if result.wall_seconds else None,
        "latency_p50_ms": _ms(percentile(result.latencies, 50)),
        "latency_p95_ms": _ms(percentile(result.latencies, 95)),
        "latency_p99_ms": _ms(percentile(result.latencies, 99)),
        "conflicts_409": result.conflicts,
        "retries": result.retries,
        "scheduler_cpu_seconds": result.cpu_seconds,
        "cpu_ms_per_instance": 1000 * result.cpu_seconds / placed if placed else None,
        "errors": result.errors[:5],
    }


def _ms(seconds: float | None) -> float | None:
    return None if seconds is None else 1000 * seconds

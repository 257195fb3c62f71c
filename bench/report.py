"""Plots and REPORT.md from the results JSON (placeholder)."""

from __future__ import annotations

from pathlib import Path
from typing import Any


def write(results: dict[str, Any], results_dir: Path, report: Path) -> None:
    return None


def summary_lines(results: dict[str, Any]) -> list[str]:
    lines = []
    for backend, suite in results["suites"].items():
        for key, v in suite["variants"].items():
            lines.append(f"{backend} ({key}) {v['title']}: {v['instances_per_second']:.1f}/s "
                         f"p50 {v['latency_p50_ms']:.1f} ms p95 {v['latency_p95_ms']:.1f} ms "
                         f"409s {v['conflicts_409']} retries {v['retries']}")
    return lines

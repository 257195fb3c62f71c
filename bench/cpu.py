"""Where a variant's CPU goes: seconds per long-lived service (Placement, PostgreSQL, etcd,
the compute daemon), read from the kernel's accounting before and after it.

On a 2-core machine every process competes with Placement for the cores, so what the
others spend per instance is what keeps the service from Placement's floor (measured with
nothing else running). Services are read as process trees (`psutil`, the children
included: gunicorn's workers, the compute's pool). The scheduler service (`schedule.py
serve`, read by `ServeProcess` before it stops) and the clients (`RunResult.cpu_seconds`:
in-process and warm clients their scheduling loop, `schedule.py` processes all of their
run, from this process's reaped children) are added by the suite.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

import psutil

# Each role's process trees: one pid, several (the API's servers of each shape), or none.
Roles = Callable[[], dict[str, int | list[int] | None]]


def tree_seconds(pid: int | list[int] | None) -> float:
    """User + system CPU seconds of `pid` (or each of a list) and its live descendants
    (0 when gone)."""
    if pid is None:
        return 0.0
    if isinstance(pid, list):
        return sum(tree_seconds(one) for one in pid)
    try:
        root = psutil.Process(pid)
        processes = [root, *root.children(recursive=True)]
    except psutil.Error:
        return 0.0
    total = 0.0
    for process in processes:
        try:
            times = process.cpu_times()
        except psutil.Error:
            continue
        total += times.user + times.system
    return total


def reaped_seconds() -> float:
    """CPU seconds of this process's children that ended and were waited for."""
    times = os.times()
    return times.children_user + times.children_system


class CpuMeter:
    """Seconds per service over one variant: `start()`, run it, `stop()`."""

    def __init__(self, roles: Roles):
        self.roles = roles
        self._before: dict[str, float] = {}

    def start(self) -> None:
        self._before = {role: tree_seconds(pid) for role, pid in self.roles().items()}

    def stop(self) -> dict[str, float]:
        return {role: max(0.0, tree_seconds(pid) - self._before.get(role, 0.0))
                for role, pid in self.roles().items()}


ROLES = ("placement", "postgresql", "etcd", "compute", "service", "api", "keystone",
         "clients")


def markdown_lines(suite: dict[str, Any], order: list[str]) -> list[str]:
    """The suite's CPU per instance by process, one row per variant that measured it."""
    rows = []
    for key in order:
        variant = suite["variants"].get(key)
        if not variant or "cpu_seconds" not in variant or not variant["instances"]:
            continue
        used, n = variant["cpu_seconds"], variant["instances"]
        cells = [f"{1000 * used.get(role, 0.0) / n:.1f}" for role in ROLES]
        total = sum(used.get(role, 0.0) for role in ROLES)
        wall = variant["wall_seconds"]
        rows.append(f"| ({key}) | {' | '.join(cells)} | {1000 * total / n:.1f} | "
                    f"{total / wall if wall else 0:.2f} |")
    if not rows:
        return []
    return ["", "CPU per instance during each variant's timed run, by process (ms; the "
            "kernel's accounting: Placement with its gunicorn workers, the compute with its "
            "pool, the service from its first request, the API's servers with their "
            "workers and the Keystone that validates their tokens (all started before the "
            "first round), the clients' scheduling; what the "
            "compute does after the run, building the last instances, is not in it), and "
            "how many of the 2 cores all of it kept busy on average:", "",
            "| variant | " + " | ".join(ROLES) + " | all | cores busy |",
            "|---" * (len(ROLES) + 3) + "|", *rows]

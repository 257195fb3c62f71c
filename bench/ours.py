"""Our scheduler, through its library seam: `Scheduler.select_destinations`.

`batch=1` is one instance per call (what `schedule.py` does without
`--count`); `batch=100` is `schedule.py --count 100`: one candidates query,
one atomic `POST /allocations`, one etcd transaction per batch.
"""

from __future__ import annotations

import time
from typing import Any

from bench.placements import Placed, RunResult
from etcd_compute.errors import EtcdComputeError
from etcd_compute.scheduler import RequestSpec, Scheduler


def run(config: dict[str, Any], count: int, query: str, batch: int = 1,
        profile_path: str | None = None, pace: float = 0.0) -> RunResult:
    """Place `count` instances in calls of `batch`, in this process (`pace` s apart)."""
    scheduler = Scheduler(config)
    result = RunResult()
    profiler = None
    if profile_path:
        from pyinstrument import Profiler

        profiler = Profiler(interval=0.0005)
        profiler.start()
    cpu, wall = time.process_time(), time.perf_counter()
    try:
        left = count
        while left > 0:
            if pace:
                time.sleep(pace)
            size = min(batch, left)
            left -= size
            started = time.perf_counter()
            try:
                destinations = scheduler.select_destinations(
                    RequestSpec.build(query, count=size, image_url="file:///dev/null"))
            except EtcdComputeError as exc:
                result.errors.append(f"batch of {size}: {exc}")
                continue
            latency = time.perf_counter() - started
            result.latencies += [latency] * len(destinations)
            result.placed += [Placed(d.uuid, d.host, d.allocations) for d in destinations]
    finally:
        result.cpu_seconds = time.process_time() - cpu
        result.wall_seconds = time.perf_counter() - wall
        if profiler is not None and profile_path:
            profiler.stop()
            with open(profile_path, "w") as out:
                out.write(profiler.output_text(unicode=False, color=False, show_all=False))
        result.conflicts = scheduler.placement.conflicts
        result.retries = scheduler.replans
        scheduler.close()
    return result

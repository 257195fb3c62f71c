"""Run one scheduling function in N processes at once and merge what they placed.

Each worker connects first (imports, gRPC channel, HTTP session), then waits
for a shared start signal, so the measured wall time is scheduling only:
from the signal to the last worker finishing.
"""

from __future__ import annotations

import multiprocessing
import time
from collections.abc import Callable
from typing import Any

from bench.placements import RunResult

# 32 processes importing the stack on a loaded 2-core machine (load 40) missed 120 s.
START_TIMEOUT = 300.0


def _worker(function: Callable[..., RunResult], args: tuple[Any, ...],
            ready: Any, go: Any, out: Any) -> None:
    # Warm up imports so the first timed call does not pay for them.
    import etcd_compute.scheduler  # noqa: F401

    ready.release()
    if not go.wait(START_TIMEOUT):
        out.put(RunResult(errors=["start signal never came"]))
        return
    try:
        out.put(function(*args))
    except Exception as exc:  # reported, not raised: the parent fails the run
        out.put(RunResult(errors=[f"{type(exc).__name__}: {exc}"]))


def run(processes: int, function: Callable[..., RunResult],
        args_for: Callable[[int], tuple[Any, ...]], timeout: float) -> RunResult:
    """`function(*args_for(i))` in `processes` processes started together."""
    context = multiprocessing.get_context("spawn")
    ready, go, out = context.Semaphore(0), context.Event(), context.Queue()
    workers = [context.Process(target=_worker, args=(function, args_for(i), ready, go, out))
               for i in range(processes)]
    for worker in workers:
        worker.start()
    merged = RunResult()
    try:
        for _ in workers:
            if not ready.acquire(timeout=START_TIMEOUT):
                raise RuntimeError("a scheduler process did not start")
        started = time.perf_counter()
        go.set()
        for _ in workers:
            merged.merge(out.get(timeout=timeout))
        merged.wall_seconds = time.perf_counter() - started
    finally:
        for worker in workers:
            worker.join(timeout=10)
            if worker.is_alive():
                worker.kill()
                worker.join(timeout=5)
    return merged

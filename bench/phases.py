#!/usr/bin/env python3
"""Where one instance per call goes: the toy (a) and ours (b), phase by phase, interleaved.

    .venv/bin/python bench/phases.py --hosts 100 --backend sqlite --calls 60

Starts its own etcd, Placement and a fake compute with `--hosts` simulated hosts, then
places `--calls` instances each way, alternating one toy call and one of ours so that
both see the same load, and prints the p50 and mean of each phase: the Placement calls
(candidates query, claim), the etcd write, our planning (the candidates query and
what runs beside it) and the whole call. The first 5 calls of each kind are left out
(connections, caches). What bounds variant (b) against (a) in bench/REPORT.md; the
output is kept in bench/results/profiles/phases-*.txt.
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import sys
import tempfile
import time
from collections import defaultdict
from collections.abc import Callable
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from bench import baseline  # noqa: E402
from bench.placements import RunResult  # noqa: E402
from bench.services import ComputeProcess, Stack, fake_compute_config, say  # noqa: E402
from bench.variants import QUERY  # noqa: E402
from etcd_compute.etcd import Store  # noqa: E402
from etcd_compute.placement import PlacementClient  # noqa: E402
from etcd_compute.scheduler import RequestSpec, Scheduler  # noqa: E402

WARMUP = 5
RESOURCES = {"VCPU": 1, "MEMORY_MB": 256, "DISK_GB": 1}


class Timings:
    """Durations per phase name."""

    def __init__(self) -> None:
        self.samples: dict[str, list[float]] = defaultdict(list)

    def wrap(self, owner: Any, method: str, phase: str) -> None:
        """Time every call of `owner.method` as `phase`."""
        real: Callable[..., Any] = getattr(owner, method)

        def timed(*args: Any, **kwargs: Any) -> Any:
            started = time.perf_counter()
            try:
                return real(*args, **kwargs)
            finally:
                self.samples[phase].append(time.perf_counter() - started)

        setattr(owner, method, timed)

    def lines(self) -> list[str]:
        out = []
        for phase, values in sorted(self.samples.items()):
            kept = values[WARMUP:] if len(values) > 2 * WARMUP else values
            out.append(f"{phase:34s} n={len(kept):4d}  p50 {statistics.median(kept) * 1000:7.1f}"
                       f" ms  mean {statistics.mean(kept) * 1000:7.1f} ms")
        return out


def measure(config: dict[str, Any], calls: int) -> Timings:
    timings = Timings()
    placement, store = PlacementClient(config["placement"]), Store(config["etcd"])
    timings.wrap(placement, "allocation_candidates", "(a) Placement: candidates")
    timings.wrap(placement, "claim", "(a) Placement: claim (PUT)")
    timings.wrap(store, "put", "(a) etcd: put the spec")
    scheduler = Scheduler(config)
    timings.wrap(scheduler.placement, "allocation_candidates", "(b) Placement: candidates")
    timings.wrap(scheduler, "claim", "(b) Placement: claim (POST)")
    timings.wrap(scheduler, "plan", "(b) plan (candidates + the rest)")
    timings.wrap(scheduler.store, "commit", "(b) etcd: the transaction")
    ids = config["scheduler"]["project_id"], config["scheduler"]["user_id"]
    result = RunResult()
    try:
        for _ in range(calls):
            started = time.perf_counter()
            baseline.place_one(placement, store, QUERY, RESOURCES, *ids, result)
            timings.samples["(a) whole call"].append(time.perf_counter() - started)
            started = time.perf_counter()
            scheduler.select_destinations(RequestSpec.build(QUERY, image_url="file:///dev/null"))
            timings.samples["(b) whole call"].append(time.perf_counter() - started)
    finally:
        scheduler.close()
        store.close()
    if result.errors:
        raise SystemExit(f"phases: the toy failed: {result.errors[0]}")
    return timings


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--hosts", type=int, default=100)
    parser.add_argument("--backend", choices=("sqlite", "postgresql"), default="sqlite")
    parser.add_argument("--calls", type=int, default=60, help="instances placed each way")
    args = parser.parse_args(argv)
    run_dir = Path(tempfile.mkdtemp(prefix="etcd-compute-phases-"))
    stack = Stack(args.backend, run_dir, 4 if args.backend == "postgresql" else 1)
    compute = None
    try:
        stack.start()
        config = stack.schedule_config()
        say(f"starting a compute daemon with {args.hosts} simulated hosts")
        compute = ComputeProcess("compute-fake", run_dir,
                                 fake_compute_config(stack, run_dir, "compute-fake"),
                                 fake_hosts=args.hosts).start()
        time.sleep(3)
        timings = measure(config, args.calls)
    finally:
        if compute is not None:
            compute.stop()
        stack.stop()
        shutil.rmtree(run_dir, ignore_errors=True)
    with open("/proc/loadavg") as load:
        print(f"# bench/phases.py --hosts {args.hosts} --backend {args.backend} --calls "
              f"{args.calls}; load after: {load.read().strip()}")
    print("\n".join(timings.lines()))
    return 0


if __name__ == "__main__":
    sys.exit(main())

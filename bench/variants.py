"""The scheduling variants of the report, each a function of (config, count) -> RunResult.

(a) baseline, one process            (b) ours, one instance per call
(c) ours, --count batches            (d) ours, 8 processes at once
(e) baseline, 8 processes at once
(e'8), (e'32) the toy's `schedule.py`, 8 or 32 at a time, a process per request (as the
    toy's users ran it: the fair baseline of the (f) variants)
(f) `schedule.py` processes, one instance each, 8 or 32 at a time, without (f8, f32) and
    with the scheduler service (f8s, f32s): the whole command, as users run it
(g) warm clients through the scheduler service's queue, 1, 8 or 32 at a time (g1, g8, g32)
(api1), (api32), (api32s) creates through the compute API (bench/api.py): one client, 32
    client processes, 32 with the scheduler service leading; (api32-2x8) 32 clients of an
    API with 2 workers x 8 threads (the default is 1 x 16; runs before 2026-11-25 had
    (api32-1x16) beside a 2 x 8 default)
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bench import api, baseline, clients, ours, parallel
from bench.placements import RunResult
from bench.services import ServeProcess, write_config
from etcd_compute.config import deep_merge

QUERY = "resources=VCPU:1,MEMORY_MB:256,DISK_GB:1"


@dataclass(frozen=True)
class Variant:
    key: str
    title: str
    run: Callable[[dict[str, Any], int], RunResult]
    # Instances of this variant if not the suite's (the CLI variants start a process each).
    instances: int | None = None


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


def serving(run_dir: Path, function: Callable[[dict[str, Any], int], RunResult]
            ) -> Callable[[dict[str, Any], int], RunResult]:
    """`function` with a `schedule.py serve` leading (started and stopped around it)."""
    def run(config: dict[str, Any], count: int) -> RunResult:
        serve_config = deep_merge(config, {"logging": {"level": "INFO"}})
        with ServeProcess("serve", run_dir, serve_config) as serve:
            result = function(config, count)
        result.service_cpu_seconds = serve.cpu_seconds
        return result
    return run


def cli(run_dir: Path, processes: int) -> Callable[[dict[str, Any], int], RunResult]:
    def run(config: dict[str, Any], count: int) -> RunResult:
        path = write_config(run_dir, "schedule-cli", config)
        return clients.run_cli(path, count, QUERY, processes)
    return run


def toy_cli(run_dir: Path, processes: int) -> Callable[[dict[str, Any], int], RunResult]:
    def run(config: dict[str, Any], count: int) -> RunResult:
        path = write_config(run_dir, "toy-cli", config)
        return clients.run_toy_cli(path, count, QUERY, processes)
    return run


def queue(processes: int) -> Callable[[dict[str, Any], int], RunResult]:
    return lambda config, count: clients.run_queue(config, count, QUERY, processes)


def through_api(cloud: api.ApiCloud, clients_at_once: int,
                shape: tuple[int, int] | None = None
                ) -> Callable[[dict[str, Any], int], RunResult]:
    def run(config: dict[str, Any], count: int) -> RunResult:
        server = cloud.ensure(config, shape)
        if clients_at_once == 1:
            result = api.client(server.endpoint, cloud.token, count)
        else:
            split = shares(count, clients_at_once)
            result = parallel.run(clients_at_once, api.client,
                                  lambda i: (server.endpoint, cloud.token, split[i]),
                                  timeout=3600)
        api.where_placed(config, result)
        return result
    return run


def all_variants(batch: int, processes: int, profile_dir: str | None, run_dir: Path,
                 cli_instances: int, api_cloud: api.ApiCloud | None = None) -> list[Variant]:
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
        *[Variant(f"e'{n}", f"toy's schedule.py x{n} at once", toy_cli(run_dir, n),
                  cli_instances) for n in (8, 32)],
        *[Variant(f"f{n}{'s' if service else ''}",
                  f"schedule.py x{n} at once{', service' if service else ', direct'}",
                  serving(run_dir, cli(run_dir, n)) if service else cli(run_dir, n),
                  cli_instances)
          for n in (8, 32) for service in (False, True)],
        # One client: its latency is the figure (fewer instances do); more: throughput.
        *[Variant(f"g{n}", f"service, {n} warm client{'s' if n > 1 else ''}",
                  serving(run_dir, queue(n)), cli_instances if n == 1 else None)
          for n in (1, 8, 32)],
        *([Variant("api1", "API, 1 client", through_api(api_cloud, 1), cli_instances),
           Variant("api32", "API, 32 clients", through_api(api_cloud, 32)),
           Variant("api32s", "API, 32 clients, service",
                   serving(run_dir, through_api(api_cloud, 32))),
           *[Variant(key, f"API, 32 clients, {workers} worker(s) x {threads} threads",
                     through_api(api_cloud, 32, (workers, threads)))
             for key, (workers, threads) in api.SHAPED.items()]]
          if api_cloud is not None else []),
    ]

"""Clients as users run them (variants f, g): whole `schedule.py` processes, and warm
clients that send one-instance requests through the scheduler service's queue.

(f) `run_cli`: `clients` threads, each starting `schedule.py --config X QUERY --json` (one
instance, a fresh Python process every time: imports, TLS, config) until `count` are
placed. With a `schedule.py serve` running it goes through the service, else it
schedules itself. Latency is each process's whole run.

(g) `run_queue`: one warm process per client (started before the clock, like (d) and
(e)), each sending one-instance requests through `QueueClient` one after the other:
the service's own throughput and latency, without Python's start-up in every request.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from bench import cpu, parallel
from bench.placements import Placed, RunResult
from etcd_compute.errors import EtcdComputeError
from etcd_compute.etcd import Store
from etcd_compute.ops.queue_client import QueueClient
from etcd_compute.scheduler.spec import RequestSpec

REPO = Path(__file__).resolve().parent.parent
CLI_TIMEOUT = 600


def cli_environment() -> dict[str, str]:
    """As users run it: with Python's bytecode cache (a session that set
    PYTHONDONTWRITEBYTECODE would make every process compile our modules again, ~90 ms),
    written once here before the clock starts."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    subprocess.run([sys.executable, "-m", "compileall", "-q", str(REPO / "etcd_compute")],
                   env=env, capture_output=True, check=False)
    return env


def _run_processes(argv: list[str], count: int, clients: int,
                   record: Callable[[subprocess.CompletedProcess[str], float, RunResult], None]
                   ) -> RunResult:
    """`count` runs of `argv`, `clients` at a time; `record` (called under a lock) adds each
    finished run and its latency to the result."""
    env = cli_environment()
    result = RunResult()
    lock = threading.Lock()
    left = [count]

    def client() -> None:
        while True:
            with lock:
                if left[0] <= 0:
                    return
                left[0] -= 1
            started = time.perf_counter()
            done = subprocess.run(argv, capture_output=True, text=True, timeout=CLI_TIMEOUT,
                                  cwd=REPO, env=env)
            latency = time.perf_counter() - started
            with lock:
                record(done, latency, result)

    threads = [threading.Thread(target=client) for _ in range(clients)]
    reaped = cpu.reaped_seconds()
    wall = time.perf_counter()
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    result.wall_seconds = time.perf_counter() - wall
    result.cpu_seconds = cpu.reaped_seconds() - reaped  # the processes, start to end
    return result


def run_cli(config_path: Path, count: int, query: str, clients: int) -> RunResult:
    """`count` one-instance `schedule.py` processes, `clients` at a time."""

    def record(done: subprocess.CompletedProcess[str], latency: float,
               result: RunResult) -> None:
        if done.returncode != 0:
            result.errors.append(f"exit {done.returncode}: {done.stderr.strip()[:300]}")
            return
        answer = json.loads(done.stdout)
        result.conflicts += answer.get("conflicts", 0)
        for instance in answer["instances"]:
            result.placed.append(Placed(instance["uuid"], instance["host"],
                                        instance["allocations"]))
            result.latencies.append(latency)

    return _run_processes([sys.executable, str(REPO / "schedule.py"), "--config",
                           str(config_path), query, "--image", "file:///dev/null", "--json"],
                          count, clients, record)


def run_toy_cli(config_path: Path, count: int, query: str, clients: int) -> RunResult:
    """(e'): `count` runs of the toy's `schedule.py` (`bench/toy_schedule.py`: its imports,
    its two Placement calls and one etcd put), `clients` at a time, a process per request."""
    resources = {rc: int(n) for rc, n in
                 (pair.split(":") for pair in query.removeprefix("resources=").split(","))}

    def record(done: subprocess.CompletedProcess[str], latency: float,
               result: RunResult) -> None:
        line = done.stdout.strip().splitlines()[-1] if done.stdout.strip() else ""
        if done.returncode != 0 or not line.startswith("NOTIFIED TARGET, "):
            result.errors.append(f"exit {done.returncode}: {done.stdout.strip()[-200:]} "
                                 f"{done.stderr.strip()[-300:]}")
            return
        host, uuid = line.removeprefix("NOTIFIED TARGET, ").split(", OF INSTANCE ")
        result.placed.append(Placed(uuid, host, {host: {"resources": resources}}))
        result.latencies.append(latency)

    return _run_processes([sys.executable, str(REPO / "bench" / "toy_schedule.py"),
                           str(config_path), query], count, clients, record)


# An instance nobody has: `schedule.py UUID` for it connects, reads one key, exits 1.
NOBODY = "00000000-0000-4000-8000-000000000000"


def run_floor(config_path: Path, count: int, clients: int) -> RunResult:
    """The cheapest `schedule.py` that reaches etcd (`schedule.py UUID` of an unknown
    instance: start, config, TLS, one read), `count` times, `clients` at a time: how many
    processes a second this machine can start at all, the bound of the (f) variants."""

    def record(done: subprocess.CompletedProcess[str], latency: float,
               result: RunResult) -> None:
        if done.returncode != 1 or "no instance" not in done.stderr:
            result.errors.append(f"exit {done.returncode}: {done.stderr.strip()[:300]}")
        result.latencies.append(latency)

    return _run_processes([sys.executable, str(REPO / "schedule.py"), "--config",
                           str(config_path), NOBODY], count, clients, record)


def queue_client(config: dict[str, Any], count: int, query: str) -> RunResult:
    """One warm client: `count` requests through the queue, one after the other."""
    store = Store(config["etcd"])
    client = QueueClient(store, config["scheduler"])
    result = RunResult()
    cpu, wall = time.process_time(), time.perf_counter()
    try:
        for _ in range(count):
            started = time.perf_counter()
            try:
                destinations = client.schedule(
                    RequestSpec.build(query, image_url="file:///dev/null"))
            except EtcdComputeError as exc:
                result.errors.append(str(exc))
                continue
            if destinations is None:
                result.errors.append("no scheduler service takes requests")
                continue
            result.latencies += [time.perf_counter() - started] * len(destinations)
            result.placed += [Placed(d.uuid, d.host, d.allocations) for d in destinations]
            result.conflicts += client.conflicts
    finally:
        result.cpu_seconds = time.process_time() - cpu
        result.wall_seconds = time.perf_counter() - wall
        store.close()
    return result


def run_queue(config: dict[str, Any], count: int, query: str, clients: int) -> RunResult:
    split = [count // clients + (i < count % clients) for i in range(clients)]
    return parallel.run(clients, queue_client, lambda i: (config, split[i], query),
                        timeout=3600)

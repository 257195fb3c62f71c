"""What starting our programs costs in CPU seconds (user + system, the kernel's accounting),
per entry point, for one or more checkouts side by side: the suite runs some 800 of these
processes on two cores, so their CPU is its time.

    python -m bench.start_cpu [--runs N] [--only NAME,...] TREE [TREE ...]

Against TLS etcd (client certificates, RBAC) and TLS Placement on free ports, as the tests
run them. The trees take turns run by run (old, new, old, new, ...), so the machine's
noise falls on each alike. Per run:

  show     `schedule.py UUID` of an unknown instance (exit 1): start, config, one etcd read
  place    `schedule.py QUERY`: candidates, claim, the spec written (a fake compute runs)
  destroy  `schedule.py destroy UUID` of the instance just placed
  list     `schedule.py list`
  compute  `compute.py` (fake driver, a new host each run) until its first heartbeat, and
           whole (then SIGTERM, until it exits)
  serve    `schedule.py serve` until it leads (a fresh prefix each run), and whole
  api      `schedule.py api` (gunicorn, 2 workers) until `GET /` answers, and whole

"until" figures are the process tree's CPU read from /proc at that moment; "whole" ones the
reaped process's (and its reaped children's) from wait4.
"""

from __future__ import annotations

import argparse
import os
import signal
import ssl
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
import uuid as uuidlib
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import Any

import psutil
import yaml

from bench import cpu
from etcd_compute import config as configuration
from etcd_compute import defaults
from etcd_compute.etcd import Store
from etcd_compute.etcd_auth import ROOT, EtcdAuth
from etcd_compute.pki import COMPUTE, PLACEMENT, Pki, compute_name
from etcd_compute.placement import PlacementClient
from tools.local_services import EtcdServer, PlacementServer, free_port

OPERATOR = "operator"
QUERY = "resources=VCPU:1,MEMORY_MB:64,DISK_GB:1"
READY_TIMEOUT = 60.0


def run_seconds(argv: list[str], cwd: Path, env: dict[str, str]) -> tuple[float, str]:
    """CPU seconds of one whole run of `argv` (and its children), and its stdout."""
    before = cpu.reaped_seconds()
    done = subprocess.run([sys.executable, *argv], cwd=cwd, env=env, capture_output=True,
                          text=True, timeout=120, check=False)
    return cpu.reaped_seconds() - before, done.stdout + done.stderr


def daemon_seconds(argv: list[str], cwd: Path, env: dict[str, str],
                   ready: Callable[[], bool]) -> tuple[float, float]:
    """(CPU of the process tree once `ready()`, CPU of its whole run after SIGTERM)."""
    before = cpu.reaped_seconds()
    process = subprocess.Popen([sys.executable, *argv], cwd=cwd, env=env,
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                               stdin=subprocess.DEVNULL, start_new_session=True)
    try:
        deadline = time.monotonic() + READY_TIMEOUT
        while not ready():
            if process.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"{' '.join(argv[:1] + argv[-1:])} never got ready "
                                   f"(exit {process.returncode})")
            time.sleep(0.02)
        at_ready = _tree_seconds(process.pid)
        process.send_signal(signal.SIGTERM)
        process.wait(30)
    finally:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()
    return at_ready, cpu.reaped_seconds() - before


def _tree_seconds(pid: int) -> float:
    """The tree's live processes and what each has reaped of its own children."""
    total = 0.0
    root = psutil.Process(pid)
    for process in [root, *root.children(recursive=True)]:
        try:
            times = process.cpu_times()
        except psutil.Error:
            continue
        total += times.user + times.system + times.children_user + times.children_system
    return total


class Bench:
    """The services, the configs of each tree's runs, and the figures."""

    def __init__(self, tmp: Path, stack: ExitStack):
        self.tmp = tmp
        self.pki = Pki(tmp / "pki")
        self.pki.init("start-cpu")
        self.etcd = EtcdServer.create(tmp / "etcd", pki=self.pki)
        self.etcd.start().enable_auth([OPERATOR])
        stack.callback(self.etcd.stop)
        self.placement_server = PlacementServer.create(tmp / "placement", pki=self.pki)
        self.placement_server.start()
        stack.callback(self.placement_server.stop)
        self.placement = PlacementClient(self.placement_server.client_config(OPERATOR))
        self.prefix = "/start-cpu"
        self.store = Store(self.etcd.client_config(self.prefix, OPERATOR))
        stack.callback(self.store.close)
        self.env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}

    # ------------------------------------------------------------------ configs

    def write(self, name: str, data: dict[str, Any]) -> Path:
        path = self.tmp / f"{name}.yaml"
        path.write_text(yaml.safe_dump(data))
        return path

    def schedule_config(self, prefix: str) -> dict[str, Any]:
        return configuration.deep_merge(defaults.SCHEDULE_DEFAULTS, {
            "etcd": self.etcd.client_config(prefix, OPERATOR),
            "placement": self.placement_server.client_config(OPERATOR),
            "scheduler": {"default_image": "file:///dev/null", "etcd_max_txn_ops": 4096,
                          "max_instances_per_host": 100000}})

    def compute_config(self, prefix: str) -> dict[str, Any]:
        """A new fake-driver host in `prefix`, with its own certificate and etcd role."""
        rp_uuid = str(uuidlib.uuid4())
        issued = self.pki.issue(compute_name(rp_uuid), COMPUTE)
        with Store(self.etcd.client_config(prefix, ROOT)) as root:
            EtcdAuth(root).add_host(rp_uuid)
        tls = {"ca_cert": str(self.pki.ca_cert), "cert": str(issued.cert),
               "key": str(issued.key)}
        state = self.tmp / f"state-{rp_uuid}"
        return configuration.deep_merge(defaults.COMPUTE_DEFAULTS, {
            "etcd": {**self.etcd.client_config(prefix), **tls},
            "placement": {**self.placement_server.client_config(), **tls},
            "compute": {"uuid": rp_uuid, "name": f"host-{rp_uuid[:8]}",
                        "state_dir": str(state), "instances_dir": str(state / "instances"),
                        "heartbeat_ttl": 3, "fence_margin_seconds": 1, "workers": 2,
                        "shutdown_timeout_seconds": 10,
                        "inventory": {
                            "VCPU": {"total": 10000, "reserved": 0, "allocation_ratio": 1.0},
                            "MEMORY_MB": {"total": 1000000, "reserved": 0,
                                          "allocation_ratio": 1.0},
                            "DISK_GB": {"total": 10000, "reserved": 0,
                                        "allocation_ratio": 1.0}}},
            "driver": {"name": "fake"}})

    def api_config(self, prefix: str, port: int) -> dict[str, Any]:
        issued = self.pki.issue(f"api-{port}", PLACEMENT, ips=["127.0.0.1"])
        # Tokens are validated at a request that carries one: `GET /` carries none, so no
        # Keystone is needed to start and answer.
        authtoken = {"auth_url": "https://127.0.0.1:1/v3", "username": "etcd-compute",
                     "password": "unused", "project_name": "service", "auth_type": "password",
                     "cafile": str(self.pki.ca_cert)}
        return configuration.deep_merge(self.schedule_config(prefix), {
            "api": {"listen": f"127.0.0.1:{port}", "workers": 2, "threads": 8,
                    "cert": str(issued.cert), "key": str(issued.key),
                    "keystone_authtoken": authtoken}})

    # ------------------------------------------------------------------ helpers

    def alive(self, store: Store, rp_uuid: str) -> Callable[[], bool]:
        return lambda: store.get(store.keys.alive(rp_uuid)) is not None

    def leading(self, store: Store) -> Callable[[], bool]:
        return lambda: store.get(store.keys.leader()) is not None

    def answers(self, port: int) -> Callable[[], bool]:
        context = ssl.create_default_context(cafile=str(self.pki.ca_cert))

        def check() -> bool:
            try:
                with urllib.request.urlopen(f"https://127.0.0.1:{port}/", timeout=2,
                                            context=context) as response:
                    return 200 <= response.status < 300
            except OSError:
                return False

        return check

    @contextmanager
    def fresh_prefix(self) -> Iterator[tuple[str, Store]]:
        prefix = f"/start-cpu-{uuidlib.uuid4().hex[:10]}"
        store = Store(self.etcd.client_config(prefix, OPERATOR))
        try:
            yield prefix, store
        finally:
            store.client.delete_prefix(prefix + "/")
            store.close()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("trees", nargs="+", type=Path)
    parser.add_argument("--runs", type=int, default=10)
    parser.add_argument("--only", default="show,place,destroy,list,compute,serve,api")
    args = parser.parse_args(argv)
    trees = [tree.resolve() for tree in args.trees]
    wanted = args.only.split(",")
    figures: dict[str, dict[Path, list[float]]] = {}

    def add(name: str, tree: Path, seconds: float) -> None:
        figures.setdefault(name, {}).setdefault(tree, []).append(seconds)

    with tempfile.TemporaryDirectory(prefix="start-cpu-") as tmp, ExitStack() as stack:
        bench = Bench(Path(tmp), stack)
        for tree in trees:  # each tree's bytecode cache written before the clock
            subprocess.run([sys.executable, "-m", "compileall", "-q",
                            str(tree / "etcd_compute")], env=bench.env, check=False,
                           capture_output=True)
        schedule_yaml = bench.write("schedule", bench.schedule_config(bench.prefix))
        host = bench.compute_config(bench.prefix)
        host_yaml = bench.write("host", host)
        background = None
        if {"place", "destroy", "list"} & set(wanted):
            background = subprocess.Popen(
                [sys.executable, str(trees[-1] / "compute.py"), "--config", str(host_yaml)],
                cwd=trees[-1], env=bench.env, stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL, start_new_session=True)
            stack.callback(lambda: (background.terminate(), background.wait(30)))
            deadline = time.monotonic() + READY_TIMEOUT
            while not bench.alive(bench.store, host["compute"]["uuid"])():
                if time.monotonic() > deadline:
                    raise RuntimeError("the background compute never sent a heartbeat")
                time.sleep(0.1)
        schedule = ["schedule.py", "--config", str(schedule_yaml)]
        for run in range(args.runs):
            for tree in trees:
                if "show" in wanted:
                    seconds, said = run_seconds([*schedule, str(uuidlib.uuid4())], tree,
                                                bench.env)
                    assert "no instance" in said, said
                    add("show", tree, seconds)
                if "place" in wanted or "destroy" in wanted:
                    seconds, said = run_seconds([*schedule, QUERY, "--json"], tree, bench.env)
                    placed = yaml.safe_load(said)
                    uuid = placed["instances"][0]["uuid"] if isinstance(placed, dict) else \
                        placed[0]["uuid"]
                    add("place", tree, seconds)
                    seconds, said = run_seconds([*schedule, "destroy", uuid], tree, bench.env)
                    add("destroy", tree, seconds)
                if "list" in wanted:
                    add("list", tree, run_seconds([*schedule, "list"], tree, bench.env)[0])
                if "compute" in wanted:
                    with bench.fresh_prefix() as (prefix, store):
                        config = bench.compute_config(prefix)
                        path = bench.write(f"compute-{run}", config)
                        ready, whole = daemon_seconds(
                            ["compute.py", "--config", str(path)], tree, bench.env,
                            bench.alive(store, config["compute"]["uuid"]))
                        bench.placement.delete_provider(config["compute"]["uuid"])
                    add("compute until heartbeat", tree, ready)
                    add("compute whole", tree, whole)
                if "serve" in wanted:
                    with bench.fresh_prefix() as (prefix, store):
                        path = bench.write(f"serve-{run}", bench.schedule_config(prefix))
                        ready, whole = daemon_seconds(
                            ["schedule.py", "--config", str(path), "serve"], tree, bench.env,
                            bench.leading(store))
                    add("serve until leading", tree, ready)
                    add("serve whole", tree, whole)
                if "api" in wanted:
                    with bench.fresh_prefix() as (prefix, _store):
                        port = free_port()
                        path = bench.write(f"api-{run}", bench.api_config(prefix, port))
                        ready, whole = daemon_seconds(
                            ["schedule.py", "--config", str(path), "api"], tree, bench.env,
                            bench.answers(port))
                    add("api until answering", tree, ready)
                    add("api whole", tree, whole)
            print(f"run {run + 1}/{args.runs} done", file=sys.stderr, flush=True)
    print_table(figures, trees)
    return 0


def print_table(figures: dict[str, dict[Path, list[float]]], trees: list[Path]) -> None:
    """Median CPU ms per entry point and tree (the kernel counts in ticks: 10 ms here, so
    the mean beside it); with two trees, the second's change."""
    head = "| entry point | " + " | ".join(f"{tree.name} median (mean) ms" for tree in trees)
    head += " | change |" if len(trees) == 2 else " |"
    print(head)
    print("|---" * (len(trees) + 1 + (len(trees) == 2)) + "|")
    for name, by_tree in figures.items():
        medians = [1000 * statistics.median(by_tree[tree]) for tree in trees]
        means = [1000 * statistics.mean(by_tree[tree]) for tree in trees]
        cells = " | ".join(f"{median:.0f} ({mean:.0f})"
                           for median, mean in zip(medians, means, strict=True))
        change = f" | {100 * (medians[1] / medians[0] - 1):+.0f}% |" if len(trees) == 2 \
            else " |"
        print(f"| {name} | {cells}{change}")


if __name__ == "__main__":
    sys.exit(main())

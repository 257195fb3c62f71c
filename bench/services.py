"""The services one benchmark run needs, started here and stopped by pid.

`Stack` is etcd + Placement (PostgreSQL with several gunicorn workers, or
SQLite with one) for one column of the report; `ComputeProcess` is a
`compute.py` daemon (optionally `--fake-hosts N`) with its own config file.
Everything lives under the run directory and goes away on `stop()`, which
the runner calls in a `finally`, failure or not.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psutil
import yaml

from etcd_compute.config import deep_merge
from etcd_compute.defaults import SCHEDULE_DEFAULTS
from etcd_compute.pki import Pki
from tools.local_services import (
    REPO,
    EtcdServer,
    PlacementServer,
    PostgresServer,
    stop_pid,
)

# etcd's --max-txn-ops as EtcdServer starts it (a `--count 500` request writes 1000
# puts in one transaction); scheduler.etcd_max_txn_ops must say the same.
ETCD_MAX_TXN_OPS = 4096
# What one simulated host offers: 60 instances of VCPU:1,MEMORY_MB:256,DISK_GB:1
# (memory bound: (16384 - 1024) / 256 = 60).
FAKE_HOST_INVENTORY: dict[str, dict[str, Any]] = {
    "VCPU": {"total": 16, "reserved": 0, "allocation_ratio": 4.0},
    "MEMORY_MB": {"total": 16384, "reserved": 1024, "allocation_ratio": 1.0},
    "DISK_GB": {"total": 100, "reserved": 1, "allocation_ratio": 1.0},
}
OPERATOR = "operator"
PROJECT_ID = "00000000-0000-0000-0000-00000000b0b0"
USER_ID = "00000000-0000-0000-0000-00000000b0b0"


_STARTED = time.monotonic()


def say(line: str) -> None:
    print(f"==> [{time.monotonic() - _STARTED:5.0f} s] {line}", flush=True)


def machine_line() -> str:
    """The machine in one line, for a benchmark's report: CPU, cores, memory, kernel."""
    cpu = next((line.split(":", 1)[1].strip() for line in
                Path("/proc/cpuinfo").read_text().splitlines() if line.startswith("model name")),
               "?")
    return (f"{cpu}, {psutil.cpu_count()} cores, "
            f"{psutil.virtual_memory().total / 2**30:.1f} GiB; kernel {os.uname().release}")


def checkout_commit() -> str:
    """The checkout's commit, short, for a benchmark's results ("" outside git)."""
    return subprocess.run(["git", "-C", str(REPO), "rev-parse", "--short", "HEAD"],
                          capture_output=True, text=True, check=False).stdout.strip()


def save_results(path: Path, results: dict[str, Any], started: float, note: str = "") -> None:
    """Stamp a benchmark's results (load after, date, duration since `started`) and write
    them to `path` as JSON, for bench/report.py."""
    results.update(load_after=Path("/proc/loadavg").read_text().strip(),
                   date=time.strftime("%Y-%m-%d %H:%M:%S %Z"),
                   duration_seconds=time.monotonic() - started)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(results, indent=1))
    say(f"results: {path} ({results['duration_seconds']:.0f} s){note}")


@dataclass
class Stack:
    """etcd + Placement for one backend ("postgresql" or "sqlite"), plain or with TLS
    (etcd: client certificates and RBAC; Placement: a cluster certificate required)."""

    backend: str
    run_dir: Path
    placement_workers: int = 1
    tls: bool = False
    etcd: EtcdServer | None = None
    postgres: PostgresServer | None = None
    placement: PlacementServer | None = None

    def start(self) -> Stack:
        self.run_dir.mkdir(parents=True, exist_ok=True)
        pki = None
        if self.tls:
            pki = Pki(self.run_dir / "pki")
            pki.init("etcd-compute-bench")
        self.etcd = EtcdServer.create(self.run_dir, pki=pki).start()
        if pki is not None:
            self.etcd.enable_auth([OPERATOR])
        db_url = None
        if self.backend == "postgresql":
            self.postgres = PostgresServer.create(self.run_dir).start()
            db_url = self.postgres.url
        else:
            self.placement_workers = 1
        self.placement = PlacementServer.create(
            self.run_dir, db_url=db_url, workers=self.placement_workers, pki=pki).start()
        say(f"{self.backend}: etcd pid {self.etcd.pid}, Placement pid {self.placement.pid} "
            f"({self.placement_workers} worker(s)) at {self.placement.endpoint}"
            f"{', TLS + RBAC' if self.tls else ''}")
        return self

    def stop(self) -> None:
        for service in (self.placement, self.postgres, self.etcd):
            if service is not None:
                stop_pid_tree(service.pid)
                service.stop()

    @property
    def etcd_config(self) -> dict[str, Any]:
        """The operator's view (one fake-hosts daemon acts for many hosts: it is one too)."""
        assert self.etcd is not None
        return {**self.etcd.client_config("", OPERATOR if self.tls else None),
                "timeout": 10.0}

    @property
    def placement_config(self) -> dict[str, Any]:
        assert self.placement is not None
        return {**self.placement.client_config(OPERATOR), "timeout": 120.0}

    def schedule_config(self, **scheduler: Any) -> dict[str, Any]:
        """A scheduler config for this stack (validated by the Scheduler's users)."""
        return deep_merge(SCHEDULE_DEFAULTS, {
            "etcd": self.etcd_config,
            "placement": self.placement_config,
            "scheduler": {"project_id": PROJECT_ID, "user_id": USER_ID,
                          "etcd_max_txn_ops": ETCD_MAX_TXN_OPS, **scheduler},
        })


def stop_pid_tree(pid: int | None, timeout: float = 10.0) -> None:
    """Stop `pid`, then any of its descendants still alive (each by its own pid)."""
    if pid is None:
        return
    try:
        descendants = psutil.Process(pid).children(recursive=True)
    except psutil.Error:
        descendants = []
    stop_pid(pid, timeout)
    for child in descendants:
        stop_pid(child.pid, 5.0)


@dataclass
class ComputeProcess:
    """One `compute.py` daemon started with a config file of its own."""

    name: str
    run_dir: Path
    config: dict[str, Any]
    fake_hosts: int = 0
    pid: int | None = None
    extra_env: dict[str, str] = field(default_factory=dict)

    @property
    def log_path(self) -> Path:
        return self.run_dir / f"{self.name}.log"

    @property
    def state_dir(self) -> Path:
        return Path(self.config["compute"]["state_dir"])

    def start(self, timeout: float = 900.0) -> ComputeProcess:
        self.run_dir.mkdir(parents=True, exist_ok=True)
        config_path = self.run_dir / f"{self.name}.yaml"
        config_path.write_text(yaml.safe_dump(self.config))
        argv = [sys.executable, str(REPO / "compute.py"), "--config", str(config_path)]
        if self.fake_hosts:
            argv += ["--fake-hosts", str(self.fake_hosts)]
        with open(self.log_path, "ab") as log:
            process = subprocess.Popen(
                argv, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                cwd=self.run_dir, start_new_session=True,
                env={**os.environ, **self.extra_env},
            )
        self.pid = process.pid
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if process.poll() is not None:
                raise RuntimeError(f"compute daemon {self.name} exited at start "
                                   f"(status {process.returncode}); see {self.log_path}")
            if "compute ready" in self.log_path.read_text(errors="replace"):
                return self
            time.sleep(0.2)
        self.stop()
        raise RuntimeError(f"compute daemon {self.name} not ready within {timeout:.0f} s; "
                           f"see {self.log_path}")

    def rss_mb(self) -> dict[str, float]:
        """RSS of the main process and of main + pool workers (forkserver included)."""
        main = psutil.Process(self.pid)
        own = main.memory_info().rss
        total = own
        for child in main.children(recursive=True):
            try:
                total += child.memory_info().rss
            except psutil.Error:
                continue
        return {"main_mb": own / 2**20, "with_workers_mb": total / 2**20}

    def stop(self) -> None:
        # A fake daemon disables its providers one by one at shutdown; we throw them away.
        stop_pid_tree(self.pid, timeout=5.0)
        self.pid = None


@dataclass
class ServeProcess:
    """`schedule.py serve` (the controller and its scheduler service) for a variant: started
    and left when the queue is open, stopped by pid, its log kept in the run directory."""

    name: str
    run_dir: Path
    config: dict[str, Any]
    pid: int | None = None
    # CPU seconds it used, read as it stops.
    cpu_seconds: float = 0.0

    @property
    def config_path(self) -> Path:
        return self.run_dir / f"{self.name}.yaml"

    def __enter__(self) -> ServeProcess:
        self.run_dir.mkdir(parents=True, exist_ok=True)
        self.config_path.write_text(yaml.safe_dump(self.config))
        with open(self.run_dir / f"{self.name}.log", "ab") as log:
            process = subprocess.Popen(
                [sys.executable, str(REPO / "schedule.py"), "--config",
                 str(self.config_path), "serve"],
                stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                cwd=self.run_dir, start_new_session=True)
        self.pid = process.pid
        from etcd_compute.etcd import Store

        with Store(self.config["etcd"]) as store:
            deadline = time.monotonic() + 60
            while store.get(store.keys.queue_open()) is None:
                if process.poll() is not None or time.monotonic() > deadline:
                    self.__exit__()
                    raise RuntimeError(f"schedule.py serve did not open the queue; see "
                                       f"{self.run_dir / self.name}.log")
                time.sleep(0.1)
        from bench.cpu import tree_seconds

        self._started_cpu = tree_seconds(self.pid)  # its start (imports, snapshot) not counted
        return self

    def __exit__(self, *_exc: object) -> None:
        from bench.cpu import tree_seconds

        self.cpu_seconds = tree_seconds(self.pid) - getattr(self, "_started_cpu", 0.0)
        stop_pid_tree(self.pid, timeout=10.0)
        self.pid = None


def write_config(run_dir: Path, name: str, config: dict[str, Any]) -> Path:
    """A schedule.yaml for `schedule.py` processes (the CLI variants)."""
    run_dir.mkdir(parents=True, exist_ok=True)
    path = run_dir / f"{name}.yaml"
    path.write_text(yaml.safe_dump(config))
    return path


def fake_compute_config(stack: Stack, run_dir: Path, name: str,
                        level: str = "INFO") -> dict[str, Any]:
    return {
        "etcd": stack.etcd_config,
        "placement": stack.placement_config,
        "logging": {"level": level},
        "compute": {
            "name": name,
            "uuid": "00000000-0000-0000-0000-0000000c0de0",
            "state_dir": str(run_dir / f"{name}-state"),
            "instances_dir": str(run_dir / f"{name}-instances"),
            "heartbeat_ttl": 30,
            "inventory_refresh_seconds": 3600,
            "inventory": FAKE_HOST_INVENTORY,
        },
        "driver": {"name": "fake"},
    }

"""Recovery time: a host dies, its instance runs again on another host.

Two fake-driver compute daemons and one controller (`schedule.py serve`) on
one etcd + Placement. Each round places one instance (`--on-host-failure
rebuild`), kills the daemon of the host it landed on (SIGKILL, and its
guests with it, as a power loss) and times, from the kill:

- lease: until its `/alive/<rp>` key is gone (what is left of the heartbeat
  TTL since the last renewal: between 2/3 TTL and the TTL);
- grace: from then until the controller moved the instance (spec and record
  on the other host): `host_failure_grace_seconds` plus the controller's
  reaction and its claim move;
- build: from then until ACTIVE there (the driver's build, `build_seconds`).

The killed host is started again before the next round (it destroys its
stale copy). The floor the configuration implies is TTL + grace; the report
gives the measured total as a ratio of it, from the same run.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import uuid as uuidlib
from pathlib import Path
from typing import Any

import yaml

from bench.services import ComputeProcess, Stack, fake_compute_config, say, stop_pid_tree
from bench.stats import percentile
from etcd_compute.config import deep_merge
from etcd_compute.defaults import COMPUTE_DEFAULTS
from etcd_compute.drivers.fake import FakeDriver
from etcd_compute.etcd import Store
from etcd_compute.instances import records, states
from etcd_compute.ops import operations
from etcd_compute.scheduler.scheduler import Scheduler
from etcd_compute.scheduler.spec import RequestSpec
from tools.local_services import REPO

TTL, MARGIN, GRACE, BUILD_SECONDS = 3, 1.0, 2.0, 0.5
QUERY = "resources=VCPU:1,MEMORY_MB:256,DISK_GB:1"
POLL = 0.02


def _host(stack: Stack, run_dir: Path, name: str) -> ComputeProcess:
    config = deep_merge(fake_compute_config(stack, run_dir, name), {
        "compute": {"uuid": str(uuidlib.uuid4()), "heartbeat_ttl": TTL,
                    "fence_margin_seconds": MARGIN},
        "driver": {"fake": {"build_seconds": BUILD_SECONDS}},
    })
    return ComputeProcess(name, run_dir, config)


def _until(what: str, check: Any, timeout: float = 60.0) -> float:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if check():
            return time.monotonic()
        time.sleep(POLL)
    raise RuntimeError(f"recovery bench: timed out waiting for {what}")


def run_recovery(run_dir: Path, rounds: int) -> dict[str, Any]:
    if rounds <= 0:
        return {"skipped": "0 rounds asked"}
    stack = Stack("sqlite", run_dir / "stack").start()
    hosts = [_host(stack, run_dir, name) for name in ("recovery-a", "recovery-b")]
    controller = None
    samples: list[dict[str, float]] = []
    try:
        config = stack.schedule_config(host_failure_grace_seconds=GRACE,
                                       controller_lease_ttl=3, on_host_failure="rebuild")
        config_path = run_dir / "controller.yaml"
        config_path.write_text(yaml.safe_dump(config))
        log = open(run_dir / "controller.log", "ab")
        controller = subprocess.Popen(
            [sys.executable, str(REPO / "schedule.py"), "--config", str(config_path), "serve"],
            stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, cwd=run_dir,
            start_new_session=True)
        log.close()
        for host in hosts:
            host.start()
        store = Store(config["etcd"])
        scheduler = Scheduler(config, store=store)
        _until("the controller to lead", lambda: store.get(store.keys.leader()))
        for index in range(rounds):
            samples.append(_round(store, scheduler, hosts))
            say(f"recovery round {index + 1}/{rounds}: " + ", ".join(
                f"{k} {v:.2f} s" for k, v in samples[-1].items()))
        store.close()
    finally:
        for host in hosts:
            host.stop()
        if controller is not None:
            stop_pid_tree(controller.pid)
        stack.stop()
    return {
        "rounds": rounds, "ttl_s": TTL, "fence_margin_s": MARGIN, "grace_s": GRACE,
        "build_s": BUILD_SECONDS, "samples": samples,
        **{part: _spread([s[part] for s in samples])
           for part in ("lease", "grace", "build", "total")},
        "floor_s": TTL + GRACE,
    }


def _spread(values: list[float]) -> dict[str, float | None]:
    return {"p50_s": percentile(values, 50), "max_s": max(values) if values else None}


def _kill(process: ComputeProcess) -> None:
    """SIGKILL the daemon and its workers (its own process group): no clean shutdown."""
    assert process.pid is not None
    try:
        os.killpg(process.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    stop_pid_tree(process.pid, timeout=5.0)  # reaps it
    process.pid = None


def _round(store: Store, scheduler: Scheduler, hosts: list[ComputeProcess]
           ) -> dict[str, float]:
    for host in hosts:  # the one killed last round comes back first
        if host.pid is None:
            host.start()
        rp = host.config["compute"]["uuid"]
        _until("heartbeats", lambda rp=rp: store.get(store.keys.alive(rp)))
    (placed,) = scheduler.select_destinations(RequestSpec.build(QUERY,
                                                                on_host_failure="rebuild"))
    uuid, rp = placed.uuid, placed.host
    victim = next(h for h in hosts if h.config["compute"]["uuid"] == rp)
    other_rp = next(h.config["compute"]["uuid"] for h in hosts if h is not victim)

    def state_on(host: str) -> str | None:
        location, read = records.find(store, uuid)
        return read.state if location == host else None

    _until("ACTIVE on the victim", lambda: state_on(rp) == states.ACTIVE)
    killed = time.monotonic()
    _kill(victim)
    FakeDriver(deep_merge(COMPUTE_DEFAULTS, victim.config)).fence()  # the machine went too
    lease = _until("the lease to expire", lambda: store.get(store.keys.alive(rp)) is None)
    moved = _until("the controller to move it", lambda: state_on(other_rp) is not None)
    active = _until("ACTIVE on the other host", lambda: state_on(other_rp) == states.ACTIVE)
    # The next round starts from empty hosts: destroy it where it runs now.
    operations.destroy(store, scheduler.placement, uuid)
    _until("the instance destroyed", lambda: state_on(other_rp) in (None, states.DELETED))
    return {"lease": lease - killed, "grace": moved - lease, "build": active - moved,
            "total": active - killed}

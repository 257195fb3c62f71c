#!/usr/bin/env python3
"""Draining a host and recovering one whose compute died (issue 21), with real guests, against
their baselines in the same run.

    .venv/bin/python bench/drain_and_fence.py     # ~15 min: writes bench/results/drain_fence.json

Two hypervisor hosts on this machine, each a network namespace with its own libvirtd on
TLS and its compute daemon there (`tools/local_services/hypervisors.py`), etcd and
Placement (SQLite) and a controller (`schedule.py serve`) in the root namespace. The
guests are the test guest (TCG, 128 MiB, 1 GiB disk) printing a counter every 100 ms.

- drain: four guests on host a; `schedule.py host drain` moves them live to b (two at a
  time), timed from the command's start to its end; then `--mode rebuild` drains b back
  to a (each built again from its image: the baseline, what a drain did before), timed
  to the command's end and to the last guest counting again.
- recovery: one guest on a; its compute killed (SIGKILL: the guest runs on, its libvirtd
  answers); timed from the kill to the instance moved to b and to it counting there.
  With the controller fencing through libvirt, then without fencing (TTL + grace), in
  the same run. Each time, how long the old copy on a went on writing after the new one
  on b wrote its first line (with fencing it must not: the run fails if it did).
"""

from __future__ import annotations

import argparse
import os
import re
import signal
import subprocess
import sys
import tempfile
import time
import uuid as uuidlib
from pathlib import Path
from typing import Any

import yaml

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.services import ServeProcess, Stack, checkout_commit, save_results, say  # noqa: E402
from etcd_compute import events, messages  # noqa: E402
from etcd_compute.config import deep_merge  # noqa: E402
from etcd_compute.defaults import COMPUTE_DEFAULTS
from etcd_compute.etcd import Store  # noqa: E402
from etcd_compute.instances import records  # noqa: E402
from etcd_compute.placement import PlacementClient  # noqa: E402
from tools.local_services import REPO  # noqa: E402
from tools.local_services.hypervisors import GUEST_CIDR, ComputeHosts, Hypervisors  # noqa: E402

RESULTS = Path(__file__).resolve().parent / "results" / "drain_fence.json"
ROOT = Path("/var/tmp/etcd-compute-bench")
RESOURCES = {"VCPU": 1, "MEMORY_MB": 128, "DISK_GB": 1}
TTL, MARGIN, GRACE = 3, 1.0, 10.0
COUNTER = r"""#!/bin/sh
. /etc/guest-functions
n=0
while true; do n=$((n + 1)); say "tick $n"; usleep 100000; done
"""


def ticks(text: str) -> list[int]:
    return [int(m) for m in re.findall(r"^ETCD-COMPUTE-GUEST tick (\d+)$", text, re.M)]


def until(what: str, check: Any, timeout: float = 600.0, interval: float = 0.05) -> float:
    started = time.monotonic()
    while time.monotonic() - started < timeout:
        if check():
            return time.monotonic()
        time.sleep(interval)
    raise SystemExit(f"bench/drain_and_fence.py: timed out after {timeout:.0f} s waiting for "
                     f"{what}")


class Bench:
    def __init__(self, run_dir: Path, stack: Stack, hosts: Hypervisors, image: Path):
        self.run_dir, self.stack, self.hosts, self.image = run_dir, stack, hosts, image
        self.store = Store(stack.etcd_config)
        self.placement = PlacementClient(stack.placement_config)
        self.computes = ComputeHosts(hosts, self._host_config, self._write, run_dir)

    def _host_config(self, name: str) -> dict[str, Any]:
        return deep_merge(COMPUTE_DEFAULTS, {
            "etcd": {**self.stack.etcd_config, "election_seconds": 0},
            "placement": self.stack.placement_config,
            "logging": {"level": "INFO"},
            "compute": {"uuid": str(uuidlib.uuid4()), "name": name, "heartbeat_ttl": TTL,
                        "fence_margin_seconds": MARGIN, "workers": 4,
                        "inventory": {"VCPU": {"total": 8, "reserved": 0},
                                      "MEMORY_MB": {"total": 4096, "reserved": 0},
                                      "DISK_GB": {"total": 40, "reserved": 0}}},
        })

    def _write(self, name: str, config: dict[str, Any]) -> Path:
        path = self.run_dir / name
        path.write_text(yaml.safe_dump(config))
        return path

    def schedule_config(self, fencing: bool) -> dict[str, Any]:
        pki = self.hosts.pki.issue_libvirt("controller", self.hosts.root / "controller-pki",
                                           client_only=True)
        return self.stack.schedule_config(
            host_failure_grace_seconds=GRACE, controller_lease_ttl=3,
            fencing={"libvirt_pki_dir": str(pki) if fencing else None})

    def schedule(self, config: dict[str, Any], *args: str) -> subprocess.CompletedProcess:
        path = self._write("schedule.yaml", config)
        return subprocess.run([sys.executable, str(REPO / "schedule.py"), "--config",
                               str(path), *args], capture_output=True, text=True,
                              cwd=REPO, timeout=1800, check=False)

    def start_compute(self, name: str) -> None:
        self.computes.start(name)
        until(f"host {name}'s heartbeat",
              lambda: self.store.get(self.store.keys.alive(self.computes.rp(name))), 120)

    def guest_on(self, name: str) -> str:
        rp, uuid = self.computes.rp(name), str(uuidlib.uuid4())
        gateway = GUEST_CIDR.rsplit(".", 1)[0] + ".1"
        spec = {"action": "build", "uuid": uuid, "name": f"bench-{uuid[:8]}", "host": rp,
                "resources": dict(RESOURCES), "allocations": {rp: {"resources": RESOURCES}},
                "image": {"url": f"file://{self.image}", "sha256": None},
                "project_id": "bench", "user_id": "bench", "requested_at": time.time(),
                "on_host_failure": "rebuild", "user_data": COUNTER.replace("GATEWAY", gateway)}
        self.placement.claim(uuid, spec["allocations"], "bench", "bench")
        self.store.put(messages.INSTANCE_SPEC, self.store.keys.spec(rp, uuid), spec)
        return uuid

    def counting(self, name: str, uuid: str, at_least: int = 3) -> bool:
        return len(ticks(self.hosts[name].console(uuid))) >= at_least

    def on(self, uuid: str) -> tuple[str | None, str | None]:
        host, read = records.find(self.store, uuid)
        return host, read.state

    def close(self) -> None:
        self.computes.close()
        self.store.close()


def drain(bench: Bench) -> dict[str, Any]:
    guests = [bench.guest_on("a") for _ in range(4)]
    for uuid in guests:
        until("the guests counting on a", lambda u=uuid: bench.counting("a", u), 900)
    config = bench.schedule_config(fencing=True)
    started = time.monotonic()
    live = bench.schedule(config, "host", "drain", "host-a")
    live_s = time.monotonic() - started
    if live.returncode or "DRAINED 4 moved" not in live.stdout:
        raise SystemExit(f"live drain: {live.stdout[-600:]} {live.stderr[-600:]}")
    rp_b = bench.computes.rp("b")
    for uuid in guests:
        if bench.on(uuid) != (rp_b, "ACTIVE") or not bench.hosts["b"].domain_active(uuid):
            raise SystemExit(f"live drain: {uuid} is not running on b")
    say(f"live drain of 4 guests: {live_s:.1f} s")
    bench.schedule(config, "host", "enable", "host-a")
    started = time.monotonic()
    rebuild = bench.schedule(config, "host", "drain", "host-b", "--mode", "rebuild")
    rebuild_s = time.monotonic() - started
    if rebuild.returncode or "DRAINED 4 moved" not in rebuild.stdout:
        raise SystemExit(f"rebuild drain: {rebuild.stdout[-600:]} {rebuild.stderr[-600:]}")
    for uuid in guests:
        until("the rebuilt guests counting on a", lambda u=uuid: bench.counting("a", u, 1), 900)
    counting_s = time.monotonic() - started
    say(f"rebuild drain of 4 guests: {rebuild_s:.1f} s, all counting again after "
        f"{counting_s:.1f} s")
    bench.schedule(config, "host", "enable", "host-b")
    for uuid in guests:
        bench.schedule(config, "destroy", uuid, "--wait")
    return {"guests": 4, "live_seconds": round(live_s, 2),
            "rebuild_seconds": round(rebuild_s, 2),
            "rebuild_counting_seconds": round(counting_s, 2),
            "ratio_live_to_rebuild": round(live_s / rebuild_s, 3)}


def recovery(bench: Bench, fencing: bool) -> dict[str, Any]:
    uuid = bench.guest_on("a")
    until("the guest counting on a", lambda: bench.counting("a", uuid, 5), 900)
    a_log = bench.hosts["a"].instances_dir / uuid / "console.log"
    b_log = bench.hosts["b"].instances_dir / uuid / "console.log"
    rp_b = bench.computes.rp("b")
    killed = time.monotonic()
    bench.computes.kill9("a")
    moved = until("the instance moved to b", lambda: bench.on(uuid)[0] == rp_b,
                  TTL + GRACE + 60, 0.02)
    a_running_then = bench.hosts["a"].domain_active(uuid)
    b_first = until("b's copy writing", lambda: b_log.exists() and b_log.stat().st_size > 0,
                    900, 0.02)
    a_size = a_log.stat().st_size
    time.sleep(2)
    a_wrote_after = a_log.stat().st_size > a_size  # the old copy still writing
    until("b's copy counting", lambda: bench.counting("b", uuid, 1), 900)
    running_again = time.monotonic()
    how = next((e.get("detail") for e in reversed(events.read(bench.store, rp_b, uuid))
                if e["action"] == "recover"), None)
    result = {"fencing": fencing, "moved_seconds": round(moved - killed, 2), "how": how,
              "counting_seconds": round(running_again - killed, 2),
              "old_copy_off_before_move": not a_running_then,
              "old_copy_wrote_after_new_started": a_wrote_after,
              "b_first_line_after_kill_seconds": round(b_first - killed, 2)}
    say(f"recovery {'with libvirt fencing' if fencing else 'without fencing'}: moved "
        f"{result['moved_seconds']} s after the kill, counting {result['counting_seconds']} s "
        f"after it; old copy {'off' if not a_running_then else 'STILL RUNNING'} when it moved")
    if fencing and (a_running_then or a_wrote_after):
        raise SystemExit(f"recovery with fencing: the old copy ran on ({how})")
    bench.start_compute("a")  # it destroys its stale copy (without fencing: that ends it)
    until("a's stale copy gone", lambda: not bench.hosts["a"].domain_active(uuid), 120)
    return result


def markdown(results: dict[str, Any]) -> list[str]:
    """The section bench/REPORT.md gets (bench/report.py adds it when drain_fence.json
    exists)."""
    d, with_f, without = results["drain"], results["recovery"][0], results["recovery"][1]
    old = ("still writing after the new one started"
           if without["old_copy_wrote_after_new_started"] else "off")
    return [
        "### Draining a host, and recovering one whose compute died (issue 21)",
        "",
        f"Generated by `bench/drain_and_fence.py` ({results['date']}, "
        f"{results['duration_seconds']:.0f} s, at {results['commit']}; load after "
        f"`{results['load_after']}`). Two hosts, each a network namespace with its own "
        "libvirtd on TLS and its compute daemon; etcd, Placement (SQLite) and a controller; "
        f"TTL {TTL} s, fence margin {MARGIN:g} s, grace {GRACE:g} s; guests as above.",
        "",
        "| what | time |",
        "|---|---|",
        f"| `host drain` of 4 guests, live (2 at a time) | {d['live_seconds']:.1f} s |",
        f"| `host drain --mode rebuild` of the same 4 (the baseline) | "
        f"{d['rebuild_seconds']:.1f} s to the command's end, {d['rebuild_counting_seconds']:.1f}"
        " s to all counting again |",
        f"| recovery after `kill -9` of the compute, fencing through libvirt | moved "
        f"{with_f['moved_seconds']:.1f} s after the kill, counting {with_f['counting_seconds']:.1f}"
        " s after it |",
        f"| the same without fencing (TTL + grace) | moved {without['moved_seconds']:.1f} s after "
        f"the kill, counting {without['counting_seconds']:.1f} s after it |",
        "",
        f"A live drain took {d['ratio_live_to_rebuild']:.2f}x the rebuild drain's time, each "
        "guest paused for its switch only, its disk kept (a rebuild boots each again from its "
        "image, its data lost). With fencing the dead compute's guest was off before its "
        f"instance moved (old copy off: {with_f['old_copy_off_before_move']}); without it, "
        f"the old copy ran on ({old}) until the compute came back and destroyed it; the "
        "recovery took "
        f"{with_f['moved_seconds'] / without['moved_seconds']:.2f}x the time.",
        "",
        "What bounds each: a live drain is its moves two at a time, each as in the section "
        "above (the memory and the written disk crossing, a pause at the switch); a rebuild "
        "drain is the boots of its guests elsewhere under TCG. A recovery with fencing is "
        "the dead compute's lease running out (at most TTL after its last renewal), then "
        f"the fence ({_fence_seconds(with_f.get('how'))}: the helper, a child Python, "
        "connects to the host's libvirtd over TLS, destroys the guest and looks again), "
        "then the rebuild on the other host; without, the lease and the grace, then the "
        "same rebuild. The old copy's end is measured from both consoles by the host's "
        "clock.",
    ]


def _fence_seconds(how: str | None) -> str:
    """The fence's own time, as the recovery's event says it."""
    found = re.search(r"fenced \(.*\) after ([0-9.]+) s", how or "")
    return f"{found.group(1)} s by the recovery's event" if found else "time not recorded"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.parse_args(argv)
    signal.signal(signal.SIGTERM, lambda signum, _frame: sys.exit(128 + signum))
    built = subprocess.run(["bash", str(REPO / "tools" / "build-test-guest.sh")],
                           capture_output=True, text=True, check=True)
    image = Path(built.stdout.strip().splitlines()[-1])
    commit = checkout_commit()
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="etcd-compute-bench-moves-") as tmp:
        run_dir = Path(tmp)
        stack = Stack("sqlite", run_dir / "stack").start()
        try:
            with Hypervisors.create(["a", "b"], ROOT, [str(image.parent)]) as hosts:
                bench = Bench(run_dir, stack, hosts, image)
                try:
                    for name in ("a", "b"):
                        bench.start_compute(name)
                    results: dict[str, Any] = {}
                    with ServeProcess("controller", run_dir, bench.schedule_config(True)):
                        results["drain"] = drain(bench)
                        fenced = recovery(bench, fencing=True)
                    with ServeProcess("controller-unfenced", run_dir,
                                      bench.schedule_config(False)):
                        unfenced = recovery(bench, fencing=False)
                    results["recovery"] = [fenced, unfenced]
                finally:
                    bench.close()
        finally:
            stack.stop()
    results.update(commit=commit, settings={"ttl": TTL, "margin": MARGIN, "grace": GRACE})
    save_results(RESULTS, results, started)
    for line in markdown(results):
        print(line)
    return 0


if __name__ == "__main__":
    os.umask(0o022)
    sys.exit(main())

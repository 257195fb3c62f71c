#!/usr/bin/env python3
"""Moving a guest (issue 21): live migration's time and downtime against a cold move and a
rebuild elsewhere (what `host drain` did before), same guest, same run.

    .venv/bin/python bench/migration.py              # ~8 min: writes bench/results/migration.json
    .venv/bin/python bench/migration.py --rounds 1 --fill-mib 128   # a quick look

Two hypervisor hosts on this machine, each a network namespace with its own libvirtd on
TLS (`tools/local_services/hypervisors.py`, as the multi-host guide sets them up). The
guest is the test guest (TCG) with 128 MiB of memory and a 1 GiB disk of which
`--fill-mib` MiB are written (random data, in the overlay) before it is measured; it
prints a counter on its console every 100 ms. Each round, on a fresh guest:

- live: `live_migrate` a -> b: the call's time, libvirt's downtime (the destination's
  figure) and the longest silence of the counter as the host read it;
- cold: `send_stopped` b -> a then `finish_incoming`, until the counter runs again (the
  guest is out of service all along: that is its downtime);
- rebuild: destroyed on a, built on b from its image until its boot is done (the disk's
  data is lost: the baseline of what a drain did).

The ratios (live / cold downtime, live / rebuild time) are within one run. After each move
the guest must run on exactly one host with its data (the filled disk's marker), or the
run exits 1. bench/report.py adds the figures to bench/REPORT.md.
"""

from __future__ import annotations

import argparse
import re
import signal
import sys
import threading
import time
import uuid as uuidlib
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.services import checkout_commit, save_results, say  # noqa: E402
from bench.stats import percentile  # noqa: E402
from tools.local_services import REPO  # noqa: E402
from tools.local_services.hypervisors import Hypervisor, Hypervisors  # noqa: E402

RESULTS = Path(__file__).resolve().parent / "results" / "migration.json"
ROOT = Path("/var/tmp/etcd-compute-bench")
GUEST_CACHE = Path.home() / ".cache" / "etcd-compute" / "test-guest"
RESOURCES = {"VCPU": 1, "MEMORY_MB": 128, "DISK_GB": 1}
BOOT_SECONDS = 300.0

# Fill the disk past its FAT partition (which ends at 49 MiB) with random data once (a
# marker on the partition says it is done: a cold move reboots the guest), then count.
GUEST_SCRIPT = r"""#!/bin/sh
. /etc/guest-functions
mkdir -p /mnt /tmp
mount -t vfat /dev/vda1 /mnt
if [ ! -f /mnt/filled ]; then
    dd if=/dev/urandom of=/tmp/chunk bs=1M count=16 2>/dev/null
    i=0
    while [ $i -lt $(( FILL_MIB / 16 )) ]; do
        dd if=/tmp/chunk of=/dev/vda bs=1M seek=$(( 64 + i * 16 )) conv=fsync 2>/dev/null
        i=$((i + 1))
    done
    rm /tmp/chunk
    echo "FILLED-$(cat /proc/sys/kernel/random/uuid)" >/mnt/filled
    sync
fi
say "filled $(cat /mnt/filled)"
n=0
while true; do
    n=$((n + 1))
    say "tick $n"
    usleep 100000
done
"""


def ticks(text: str) -> list[int]:
    return [int(m) for m in re.findall(r"^ETCD-COMPUTE-GUEST tick (\d+)$", text, re.M)]


def console(host: Hypervisor, uuid: str) -> str:
    path = host.instances_dir / uuid / "console.log"
    return path.read_text(errors="replace") if path.exists() else ""


def until(what: str, check: Any, timeout: float = BOOT_SECONDS, interval: float = 0.05) -> float:
    started = time.monotonic()
    while time.monotonic() - started < timeout:
        if check():
            return time.monotonic() - started
        time.sleep(interval)
    raise SystemExit(f"bench/migration.py: timed out after {timeout:.0f} s waiting for {what}")


class Silence:
    """The longest time between two counter lines, read from the console files every 10 ms."""

    def __init__(self, paths: list[Path]):
        self.paths, self.seen, self.stop = paths, {}, False
        self.thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> Silence:
        self.thread.start()
        return self

    def __exit__(self, *_exc: object) -> None:
        self.stop = True
        self.thread.join()

    def _run(self) -> None:
        while not self.stop:
            now = time.monotonic()
            for path in self.paths:
                try:
                    for tick in ticks(path.read_text(errors="replace")):
                        self.seen.setdefault(tick, now)
                except OSError:
                    pass
            time.sleep(0.01)

    def longest(self) -> float:
        times = [self.seen[t] for t in sorted(self.seen)]
        return max((b - a for a, b in zip(times, times[1:], strict=False)), default=0.0)


def one_copy_on(hosts: Hypervisors, name: str, uuid: str, filled: str) -> None:
    """The guest runs on `name` only, and the disk there is the filled one."""
    running = [h for h in hosts.hosts if hosts[h].domain_active(uuid)]
    if running != [name]:
        raise SystemExit(f"bench/migration.py: {uuid} runs on {running}, expected [{name}]")
    if filled not in hosts[name].driver().console(uuid):
        raise SystemExit(f"bench/migration.py: {uuid} on {name} does not show {filled}")


def round_(hosts: Hypervisors, image: Path, fill_mib: int) -> dict[str, Any]:
    a, b = hosts["a"], hosts["b"]
    uuid = str(uuidlib.uuid4())
    spec = {"action": "build", "uuid": uuid, "name": f"bench-{uuid[:8]}",
            "host": "00000000-0000-0000-0000-0000000000aa", "resources": dict(RESOURCES),
            "allocations": {}, "image": {"url": f"file://{image}", "sha256": None},
            "project_id": "bench", "user_id": "bench", "requested_at": time.time(),
            "user_data": GUEST_SCRIPT.replace("FILL_MIB", str(fill_mib))}
    a.driver().build(spec)
    filled_at = until("the guest to fill its disk",
                      lambda: re.search(r"filled (FILLED-\S+)", console(a, uuid)))
    filled = re.search(r"filled (FILLED-\S+)", console(a, uuid)).group(1)  # type: ignore[union-attr]
    until("the guest counting", lambda: len(ticks(console(a, uuid))) >= 10)
    result: dict[str, Any] = {"fill_seconds": filled_at}

    # live a -> b
    target = b.driver().prepare_incoming(spec)
    with Silence([a.instances_dir / uuid / "console.log",
                  b.instances_dir / uuid / "console.log"]) as silence:
        moved = a.driver().live_migrate(uuid, target)
        until("the guest counting on b", lambda: len(ticks(console(b, uuid))) >= 10, 60)
    one_copy_on(hosts, "b", uuid, filled)
    result["live"] = {"seconds": moved["seconds"], "downtime_ms": moved["downtime_ms"],
                      "console_silence_s": round(silence.longest(), 3),
                      "memory_bytes": moved["data_total"], "disk_bytes": moved["disk_total"],
                      "passes": moved["memory_iteration"]}
    say(f"live: {moved['seconds']:.1f} s, downtime {moved['downtime_ms']} ms, console silent "
        f"{silence.longest():.2f} s, {moved['data_total'] / 2**20:.0f} MiB of memory and "
        f"{moved['disk_total'] / 2**20:.0f} MiB of disk")

    # cold b -> a
    started = time.monotonic()
    sent = b.driver().send_stopped(uuid, a.driver().prepare_incoming(spec))
    copied = time.monotonic() - started
    a.driver().finish_incoming(spec, sent, power_on=True)
    until("the guest counting on a", lambda: len(ticks(console(a, uuid))) >= 1)
    cold = time.monotonic() - started
    b.driver().destroy(uuid)  # confirmed
    one_copy_on(hosts, "a", uuid, filled)
    disk = next(f["size"] for f in sent["files"] if f["name"] == "disk.qcow2")
    result["cold"] = {"seconds": round(cold, 3), "copy_seconds": round(copied, 3),
                      "disk_bytes": disk}
    say(f"cold: {cold:.1f} s out of service ({copied:.1f} s stopping and copying "
        f"{disk / 2**20:.0f} MiB)")

    # rebuild a -> b (the disk's data is lost)
    started = time.monotonic()
    a.driver().destroy(uuid)
    b.driver().build(spec)
    until("the rebuilt guest booted", lambda: "ETCD-COMPUTE-GUEST ready" in console(b, uuid))
    rebuild = time.monotonic() - started
    b.driver().destroy(uuid)
    result["rebuild"] = {"seconds": round(rebuild, 3)}
    say(f"rebuild: {rebuild:.1f} s until booted elsewhere (its disk's data lost)")
    return result


def summary(rounds: list[dict[str, Any]]) -> dict[str, Any]:
    def p50(values: list[float]) -> float:
        return percentile(values, 50)

    live_down = [r["live"]["downtime_ms"] / 1000 for r in rounds]
    out = {
        "live_seconds_p50": p50([r["live"]["seconds"] for r in rounds]),
        "live_downtime_s_p50": p50(live_down),
        "live_console_silence_s_p50": p50([r["live"]["console_silence_s"] for r in rounds]),
        "cold_seconds_p50": p50([r["cold"]["seconds"] for r in rounds]),
        "rebuild_seconds_p50": p50([r["rebuild"]["seconds"] for r in rounds]),
    }
    out["downtime_ratio_live_to_cold"] = out["live_downtime_s_p50"] / out["cold_seconds_p50"]
    out["time_ratio_live_to_rebuild"] = out["live_seconds_p50"] / out["rebuild_seconds_p50"]
    return out


def table(results: dict[str, Any]) -> list[str]:
    rows = ["| round | live: time | live: downtime (libvirt) | live: console silent | "
            "cold: out of service | cold: copy | rebuild: until booted |",
            "|---|---|---|---|---|---|---|"]
    for index, r in enumerate(results["rounds"], 1):
        rows.append(f"| {index} | {r['live']['seconds']:.1f} s | {r['live']['downtime_ms']} ms "
                    f"| {r['live']['console_silence_s']:.2f} s | {r['cold']['seconds']:.1f} s "
                    f"| {r['cold']['copy_seconds']:.1f} s | {r['rebuild']['seconds']:.1f} s |")
    return rows


def markdown(results: dict[str, Any]) -> list[str]:
    """The section bench/REPORT.md gets (bench/report.py adds it when migration.json exists)."""
    s, settings = results["summary"], results["settings"]
    return [
        "## Moving a guest: live migration, cold move, rebuild (issue 21)",
        "",
        f"Generated by `bench/migration.py` ({results['date']}, "
        f"{results['duration_seconds']:.0f} s, at {results['commit']}; load after "
        f"`{results['load_after']}`). Two hosts on this machine, each a network namespace "
        "with its own libvirtd on TLS; the test guest under TCG with "
        f"{RESOURCES['MEMORY_MB']} MiB of memory and a {RESOURCES['DISK_GB']} GiB disk of "
        f"which {settings['fill_mib']} MiB were written before each round, counting on its "
        "console every 100 ms. Live: `live_migrate` (peer to peer, TLS, the overlay copied "
        "along, auto-converge); cold: stop, copy over libvirt's storage API, start there; "
        "rebuild: destroyed and built from its image on the other host (its data lost).",
        "",
        *table(results),
        "",
        f"Medians: live {s['live_seconds_p50']:.1f} s with {s['live_downtime_s_p50'] * 1000:.0f}"
        f" ms of downtime (console silent {s['live_console_silence_s_p50']:.2f} s, which "
        "includes the 100 ms between two lines and the host's 10 ms polling); cold "
        f"{s['cold_seconds_p50']:.1f} s out of service; rebuild {s['rebuild_seconds_p50']:.1f} s."
        f" Live downtime is {s['downtime_ratio_live_to_cold']:.4f}x a cold move's; a live move "
        f"takes {s['time_ratio_live_to_rebuild']:.2f}x a rebuild's time and keeps the disk.",
        "",
        "What bounds each: a live move spends its first seconds before anything crosses "
        "(the destination's qemu started under TCG, its disk server, three TLS handshakes), "
        "then the written part of the overlay (the disk copy runs first, its writes mirrored), "
        "then memory in passes until the rest fits `max_downtime_ms` (500 ms): the downtime "
        "is that target, give or take the last pass's rate on a loaded machine. A cold move is "
        "the guest's shutdown (the test guest ignores ACPI: forced after the test's 1 s), the "
        "overlay through the storage API (its whole file: the written data, not the disk's "
        "size), and a boot under TCG, which a rebuild pays too. The figures vary with the "
        "machine's load (other runs' guests share its two cores); the ratios are within one "
        "run. Drain time and recovery with fencing: below.",
    ]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--fill-mib", type=int, default=512, choices=range(16, 897, 16),
                        metavar="MIB", help="data written to the disk first (16..896, by 16)")
    args = parser.parse_args(argv)
    signal.signal(signal.SIGTERM, lambda signum, _frame: sys.exit(128 + signum))
    import subprocess

    built = subprocess.run(["bash", str(REPO / "tools" / "build-test-guest.sh")],
                           capture_output=True, text=True, check=True)
    image = Path(built.stdout.strip().splitlines()[-1])
    commit = checkout_commit()
    started = time.monotonic()
    with Hypervisors.create(["a", "b"], ROOT, [str(image.parent)]) as hosts:
        rounds = []
        for index in range(args.rounds):
            say(f"round {index + 1} of {args.rounds}")
            rounds.append(round_(hosts, image, args.fill_mib))
    results = {"settings": {"rounds": args.rounds, "fill_mib": args.fill_mib},
               "rounds": rounds, "summary": summary(rounds), "commit": commit}
    save_results(RESULTS, results, started)
    for line in table(results):
        print(line)
    return 0


if __name__ == "__main__":
    sys.exit(main())

#!/usr/bin/env python3
"""The server view on Neutron under concurrent readers (issue 33, nodepool's path): how long
`GET /servers/{id}` and `GET /servers/detail` take when K clients poll at once, as
openstacksdk's `wait_for_server` threads do, with Neutron's API on one worker and on one
per core.

    .venv/bin/python bench/server_view.py           # 30 s per phase: server_view.json
    .venv/bin/python bench/server_view.py --quick   # 10 s per phase: server_view-quick.json

Our API answers each server view by asking Neutron, with the caller's token, for the
server's ports, their networks, floating IPs and security groups (Nova reads the addresses
from its info cache and asks Neutron for the groups). Neutron under gunicorn serves one
request at a time per worker; nodepool's 10 servers at once made every view wait behind
the others' and behind the port bindings (bench/REPORT.md, nodepool's path).

For each Neutron worker count (1, then one per core, at most 4), in the same run: `make up`'s
cloud on Neutron (bench/nodepool.py's `cloud`: free ports, a run directory of its own,
compute.py for host `local`), as the demo user a network, router on `public`, security
group and key pair (nodepool's), one server (the test guest under TCG) with a floating IP,
then per phase: one reader alone (its latency), then K readers at once for the phase's
seconds (each request's latency, and requests per second in all). Then everything deleted
and `make down`. The ratio of the per-core run to the one-worker run is the figure.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import os
import shutil
import signal
import sys
import time
import uuid as uuidlib
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.nodepool import (  # noqa: E402
    CLOUD,
    FLAVOR,
    IMAGE,
    ROOT,
    TIMEOUT,
    cloud,
    left,
    load,
    make_network,
    remove_network,
)
from bench.services import checkout_commit, machine_line, save_results, say  # noqa: E402
from bench.stats import percentile  # noqa: E402
from tools.local_services.netns import netns_usable  # noqa: E402

RESULTS = Path(__file__).resolve().parent / "results"
READERS = 10
ALONE_REQUESTS = 20


def summary(latencies: list[float], seconds: float) -> dict[str, Any]:
    """p50/p90/max of `latencies` (seconds) in ms, their count and requests per second."""
    if not latencies:
        return {"requests": 0}
    return {"requests": len(latencies), "per_s": round(len(latencies) / seconds, 2),
            "p50_ms": round(percentile(latencies, 50) * 1000, 1),
            "p90_ms": round(percentile(latencies, 90) * 1000, 1),
            "max_ms": round(max(latencies) * 1000, 1)}


def read(conn: Any, path: str, until: float) -> tuple[list[float], list[str]]:
    """GET `path` of the compute API again and again until `until` (monotonic): each
    request's seconds, and the failures."""
    latencies, errors = [], []
    while time.monotonic() < until:
        began = time.monotonic()
        try:
            answer = conn.compute.get(path, microversion="2.47")
            answer.raise_for_status()
            latencies.append(time.monotonic() - began)
        except Exception as exc:  # noqa: BLE001 (counted; the phase goes on)
            errors.append(f"{type(exc).__name__}: {str(exc)[:200]}")
    return latencies, errors


def phase(conn: Any, path: str, readers: int, seconds: float) -> dict[str, Any]:
    """One reader for ALONE_REQUESTS requests, then `readers` at once for `seconds`."""
    alone = []
    for _ in range(ALONE_REQUESTS):
        began = time.monotonic()
        conn.compute.get(path, microversion="2.47").raise_for_status()
        alone.append(time.monotonic() - began)
    until = time.monotonic() + seconds
    with concurrent.futures.ThreadPoolExecutor(readers) as pool:
        done = list(pool.map(lambda _: read(conn, path, until), range(readers)))
    together = [latency for latencies, _ in done for latency in latencies]
    errors = [error for _, failures in done for error in failures]
    return {"alone": summary(alone, sum(alone)), "at_once": summary(together, seconds),
            "errors": errors[:5], "error_count": len(errors)}


def one_cloud(top: Path, workers: int, readers: int, seconds: float) -> dict[str, Any]:
    import openstack

    run_dir = top / f"run-{workers}"
    run_dir.mkdir(mode=0o711)
    with cloud(run_dir, neutron_workers=workers) as info:
        os.environ["OS_CLIENT_CONFIG_FILE"] = str(info["run_dir"] / "clouds.yaml")
        conn = openstack.connect(cloud=CLOUD)
        tag = uuidlib.uuid4().hex[:6]
        env = make_network(conn, tag, info["run_dir"])
        out: dict[str, Any] = {"neutron_workers": workers, "make_up_s": round(info["up_s"], 1)}
        try:
            began = time.monotonic()
            server = conn.create_server(f"view-{tag}", image=IMAGE, flavor=FLAVOR,
                                        network=env["network"], key_name=env["key"],
                                        security_groups=[env["group"]], auto_ip=True,
                                        wait=True, timeout=TIMEOUT)
            out["create_to_floating_ip_s"] = round(time.monotonic() - began, 1)
            out["load_before"] = load()
            for name, path in (("show", f"/servers/{server['id']}"),
                               ("detail", "/servers/detail")):
                out[name] = phase(conn, path, readers, seconds)
                say(f"Neutron workers {workers}, GET {path}: {out[name]} (load {load()})")
            conn.delete_server(server["id"], wait=True, delete_ips=True, timeout=TIMEOUT)
            out["left"] = left(conn, env)
        finally:
            remove_network(conn, env)
    return out


def markdown(results: dict[str, Any]) -> list[str]:
    runs, settings = results["runs"], results["settings"]
    lines = [
        f"## Issue 33: the server view under {settings['readers']} readers at once, Neutron on "
        f"one API worker and on one per core ({'quick' if settings['quick'] else 'full'} "
        f"run, {results['date'][:10]})",
        "",
        f"`bench/server_view.py{' --quick' if settings['quick'] else ''}` at "
        f"{results['commit']} on {results['machine']}; load before {results['load_before']}, "
        f"after {results['load_after']}. `make up`'s cloud on Neutron per worker count, one "
        f"server (the test guest under TCG) with a floating IP, as the demo user through "
        f"openstacksdk's session (microversion 2.47): {ALONE_REQUESTS} requests alone, then "
        f"{settings['readers']} readers at once for {settings['seconds']:.0f} s.",
        "",
        "| Neutron API workers | request | alone p50 ms | at once p50 / p90 / max ms | "
        "requests/s at once | errors |",
        "|---|---|---|---|---|---|",
    ]
    for run in runs:
        for name, label in (("show", "GET /servers/{id}"), ("detail", "GET /servers/detail")):
            one = run[name]
            together = one["at_once"]
            lines.append(
                f"| {run['neutron_workers']} | {label} | {one['alone']['p50_ms']} | "
                f"{together.get('p50_ms')} / {together.get('p90_ms')} / "
                f"{together.get('max_ms')} | {together.get('per_s')} | {one['error_count']} |")
    if len(runs) == 2:
        base, many = runs
        for name in ("show", "detail"):
            a, b = base[name]["at_once"], many[name]["at_once"]
            if a.get("p50_ms") and b.get("p50_ms"):
                lines += ["", f"GET {'/servers/{id}' if name == 'show' else '/servers/detail'}"
                          f" with {settings['readers']} at once, {many['neutron_workers']} "
                          f"workers against 1: p50 {b['p50_ms'] / a['p50_ms']:.2f}x, "
                          f"requests/s {b['per_s'] / a['per_s']:.2f}x."]
    return lines


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="10 s per phase")
    parser.add_argument("--readers", type=int, default=READERS)
    parser.add_argument("--seconds", type=float)
    args = parser.parse_args(argv)
    seconds = args.seconds or (10.0 if args.quick else 30.0)
    signal.signal(signal.SIGTERM, lambda signum, _frame: sys.exit(128 + signum))
    why = netns_usable()
    if why:
        raise SystemExit(f"bench/server_view.py: {why}")
    commit = checkout_commit()
    name = f"server_view{'-quick' if args.quick else ''}.json"
    results: dict[str, Any] = {
        "settings": {"quick": args.quick, "readers": args.readers, "seconds": seconds},
        "commit": commit, "load_before": load(), "machine": machine_line(), "runs": [],
        "file": name}
    started = time.monotonic()
    ROOT.mkdir(parents=True, exist_ok=True, mode=0o711)
    top = ROOT / f"server-view-{uuidlib.uuid4().hex[:8]}"
    top.mkdir(mode=0o711)
    try:
        for workers in sorted({1, min(os.cpu_count() or 1, 4)}):
            results["runs"].append(one_cloud(top, workers, args.readers, seconds))
    finally:
        shutil.rmtree(top, ignore_errors=True)
    save_results(RESULTS / name, results, started)
    for line in markdown(results):
        print(line)
    return 0


if __name__ == "__main__":
    sys.exit(main())

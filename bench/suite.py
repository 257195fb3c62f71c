"""The scheduling suite on one Placement backend: footprint, variants (a)-(e), floors.

Order: etcd + Placement up; a one-host fake compute for idle RSS; the
N-host fake compute; then each variant from the same empty state:
run (timed) -> wait until every instance is ACTIVE (not timed) -> check
-> notification delays from etcd history -> wipe. Then Placement's floor
with (c)'s placements. Services are stopped in `finally`.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from bench import clients, floor, notification, ours, stats, verify
from bench.footprint import RssSampler
from bench.placements import RunResult
from bench.services import ComputeProcess, Stack, fake_compute_config, say, write_config
from bench.variants import QUERY, all_variants
from etcd_compute.etcd import Store
from etcd_compute.placement import PlacementClient

IDLE_SETTLE_SECONDS = 3.0
# Gap between requests for the paced notification measurement.
PACE_SECONDS = 0.05
PACED_COUNT = 200


def idle_rss(stack: Stack, run_dir: Path, hosts: int) -> dict[str, float]:
    """RSS of a fake compute daemon with `hosts` simulated hosts (0: one real identity)."""
    name = f"compute-idle-{hosts or 1}"
    config = fake_compute_config(stack, run_dir, name)
    config["compute"]["uuid"] = None  # its own provider, not the big daemon's
    compute = ComputeProcess(name, run_dir, config, fake_hosts=hosts).start()
    try:
        time.sleep(IDLE_SETTLE_SECONDS)
        return compute.rss_mb()
    finally:
        compute.stop()


def run_suite(backend: str, run_dir: Path, hosts: int, count: int, batch: int,
              processes: int, placement_workers: int, only: set[str] | None,
              profile_dir: str | None, cli_instances: int) -> dict[str, Any]:
    # "sqlite+tls": the same backend with TLS and RBAC, for what security costs.
    backend_name, _, security = backend.partition("+")
    tls = security == "tls"
    out: dict[str, Any] = {"backend": backend, "hosts": hosts, "instances": count,
                           "batch": batch, "processes": processes, "variants": {}, "tls": tls}
    stack = Stack(backend_name, run_dir, placement_workers, tls=tls)
    compute: ComputeProcess | None = None
    try:
        stack.start()
        out["placement_workers"] = stack.placement_workers
        config = stack.schedule_config()
        placement = PlacementClient(config["placement"])
        store = Store(config["etcd"])

        say(f"{backend}: compute RSS idle (one host)")
        out["rss_idle_one_host"] = idle_rss(stack, run_dir, 0)
        # The one-host daemon's provider would attract claims: remove it.
        for provider in placement.list_providers():
            placement.delete_provider(provider["uuid"])

        say(f"{backend}: starting a compute daemon with {hosts} simulated hosts")
        started = time.monotonic()
        compute = ComputeProcess("compute-fake", run_dir,
                                 fake_compute_config(stack, run_dir, "compute-fake"),
                                 fake_hosts=hosts).start()
        out["registration_seconds"] = time.monotonic() - started
        time.sleep(IDLE_SETTLE_SECONDS)
        out["rss_idle_fake_hosts"] = compute.rss_mb()
        fake_dir = compute.state_dir / "fake-instances"
        project = config["scheduler"]["project_id"]
        verify.wipe(store, placement, [], project, fake_dir)

        batch_placed = None
        with RssSampler(compute) as sampler:
            for variant in all_variants(batch, processes, profile_dir, run_dir,
                                        cli_instances):
                if only and variant.key not in only:
                    continue
                instances = variant.instances or count
                say(f"{backend}: ({variant.key}) {variant.title}: {instances} instances")
                start_revision = notification.current_revision(store)
                result = variant.run(config, instances)
                summary = stats.summarize(result)
                if result.errors:
                    raise verify.CheckFailed(f"({variant.key}) {len(result.errors)} error(s), "
                                             f"first: {result.errors[0]}")
                if len(result.placed) != instances:
                    raise verify.CheckFailed(f"({variant.key}) placed {len(result.placed)} "
                                             f"of {instances}")
                summary["active_wait_seconds"] = verify.wait_active(store, result.placed, 600)
                checks = verify.check(store, placement, result.placed, fake_dir)
                consumers = checks.pop("consumers")
                verify.queue_empty(store)
                summary["checks"] = checks
                delays = list(notification.building_delays(store, start_revision).values())
                summary["notification_ms"] = {
                    "count": len(delays),
                    "p50": _ms(stats.percentile(delays, 50)),
                    "p99": _ms(stats.percentile(delays, 99)),
                    "max": _ms(max(delays) if delays else None),
                }
                summary["title"] = variant.title
                summary["latencies_ms"] = [1000 * x for x in result.latencies]
                summary["notification_samples_ms"] = [1000 * x for x in delays]
                out["variants"][variant.key] = summary
                say(f"{backend}: ({variant.key}) {summary['instances_per_second']:.1f}/s, "
                    f"p50 {summary['latency_p50_ms']:.1f} ms, 409s {result.conflicts}, "
                    f"notify p50 {summary['notification_ms']['p50'] or 0:.1f} ms; checks ok")
                if variant.key == "c":
                    batch_placed = result.placed
                verify.wipe(store, placement, consumers, project, fake_dir)
        out["rss_peak_under_run"] = sampler.peak

        if not only or "n" in only:
            paced = min(count, PACED_COUNT)
            say(f"{backend}: notification, paced: {paced} instances one per call, "
                f"{PACE_SECONDS * 1000:.0f} ms apart (the compute is idle at each arrival)")
            start_revision = notification.current_revision(store)
            result = ours.run(config, paced, QUERY, 1, pace=PACE_SECONDS)
            verify.wait_active(store, result.placed, 600)
            checks = verify.check(store, placement, result.placed, fake_dir)
            delays = list(notification.building_delays(store, start_revision).values())
            out["notification_paced"] = {
                "count": len(delays), "pace_ms": PACE_SECONDS * 1000,
                "p50": _ms(stats.percentile(delays, 50)),
                "p99": _ms(stats.percentile(delays, 99)),
                "samples_ms": [1000 * x for x in delays]}
            verify.wipe(store, placement, checks.pop("consumers"), project, fake_dir)

        if not only or "f8s" in only or "f8" in only:
            say(f"{backend}: process floor: {cli_instances} `schedule.py UUID` (no such "
                f"instance), {processes} at a time")
            floor_result = clients.run_floor(write_config(run_dir, "schedule-floor", config),
                                             cli_instances, processes)
            if floor_result.errors:
                raise verify.CheckFailed(f"process floor: {floor_result.errors[0]}")
            out.setdefault("floor", {})["cli_processes"] = stats.summarize(floor_result)
            out["floor"]["cli_processes"].update(
                batch=1, instances_per_second=cli_instances / floor_result.wall_seconds)

        if batch_placed:
            out.setdefault("floor", {})
            for name, size in (("post_batched", batch), ("put_sequential", 1)):
                say(f"{backend}: Placement floor, {name} ({size} per request)")
                result: RunResult = floor.claim_batches(config, batch_placed, size)
                out["floor"][name] = stats.summarize(result)
                out["floor"][name]["batch"] = size
                verify.wipe(store, placement, [p.uuid for p in result.placed], project, None)
        store.close()
    finally:
        if compute is not None:
            compute.stop()
        stack.stop()
    return out


def _ms(seconds: float | None) -> float | None:
    return None if seconds is None else 1000 * seconds

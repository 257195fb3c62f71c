"""The scheduling suite on one Placement backend: footprint, variants (a)-(e), floors.

Order: etcd + Placement up; a one-host fake compute for idle RSS; the
N-host fake compute; then the variants in interleaved rounds (each variant's
share of a round, then the next variant's), each from the same empty state:
run (timed) -> wait until every instance is ACTIVE (not timed) -> check
-> notification delays from etcd history -> wipe. In each round, right after
(c), Placement's floors with (c)'s placements (the same load as the variants
around them). Services are stopped in `finally`.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bench import api, cli_start, clients, floor, notification, ours, stats, verify
from bench.cpu import CpuMeter
from bench.footprint import RssSampler
from bench.placements import RunResult
from bench.services import ComputeProcess, Stack, fake_compute_config, say, write_config
from bench.variants import QUERY, Variant, all_variants, shares
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


@dataclass
class Round:
    """One variant's share of one round: what it placed, its checks, its notifications."""

    result: RunResult
    checks: dict[str, Any]
    delays: list[float]
    cpu_seconds: dict[str, float]
    active_wait_seconds: float
    # From the client's request to the BUILDING record (the API variants).
    create_to_building: list[float]

    @property
    def rate(self) -> float:
        return len(self.result.placed) / self.result.wall_seconds \
            if self.result.wall_seconds else 0.0


def run_round(variant: Variant, config: dict[str, Any], instances: int, store: Store,
              placement: PlacementClient, meter: CpuMeter, fake_dir: Path,
              project: str) -> Round:
    """Run, wait until every instance is ACTIVE (not timed), check, read the notification
    delays, wipe back to empty."""
    start_revision = notification.current_revision(store)
    meter.start()
    result = variant.run(config, instances)
    used = meter.stop()
    if result.errors:
        raise verify.CheckFailed(f"({variant.key}) {len(result.errors)} error(s), "
                                 f"first: {result.errors[0]}")
    if len(result.placed) != instances:
        raise verify.CheckFailed(f"({variant.key}) placed {len(result.placed)} of {instances}")
    waited = verify.wait_active(store, result.placed, 600)
    checks = verify.check(store, placement, result.placed, fake_dir)
    consumers = checks.pop("consumers")
    verify.queue_empty(store)
    times = notification.building_times(store, start_revision)
    delays = [building - created for created, building in times.values()]
    create_to_building = [times[uuid][1] - asked for uuid, asked in result.started_at.items()
                          if uuid in times]
    verify.wipe(store, placement, consumers, project, fake_dir)
    return Round(result, checks, delays,
                 {**used, "service": result.service_cpu_seconds, "clients": result.cpu_seconds},
                 waited, create_to_building)


def merge_rounds(title: str, rounds: list[Round]) -> dict[str, Any]:
    """One variant's summary over its rounds: rates from the summed instances and time."""
    merged = RunResult()
    for done in rounds:
        merged.merge(done.result)
        merged.wall_seconds += done.result.wall_seconds
    summary = stats.summarize(merged)
    delays = [d for done in rounds for d in done.delays]
    summary.update(
        title=title,
        rounds=[{"instances": len(r.result.placed), "wall_seconds": r.result.wall_seconds,
                 "instances_per_second": r.rate} for r in rounds],
        active_wait_seconds=sum(r.active_wait_seconds for r in rounds),
        cpu_seconds={role: sum(r.cpu_seconds.get(role, 0.0) for r in rounds)
                     for role in rounds[0].cpu_seconds},
        checks={"providers": rounds[0].checks["providers"],
                "providers_used": max(r.checks["providers_used"] for r in rounds),
                "instances": sum(r.checks["instances"] for r in rounds),
                "over_capacity": sum(r.checks["over_capacity"] for r in rounds),
                "records_active": sum(r.checks["records_active"] for r in rounds)},
        notification_ms={"count": len(delays), "p50": _ms(stats.percentile(delays, 50)),
                         "p99": _ms(stats.percentile(delays, 99)),
                         "max": _ms(max(delays) if delays else None)},
        latencies_ms=[1000 * x for x in merged.latencies],
        **_create_to_building(rounds),
        notification_samples_ms=[1000 * x for x in delays])
    return summary


def run_suite(backend: str, run_dir: Path, hosts: int, count: int, batch: int,
              processes: int, placement_workers: int, only: set[str] | None,
              profile_dir: str | None, cli_instances: int, rounds: int = 1) -> dict[str, Any]:
    # "sqlite+tls": the same backend with TLS and RBAC, for what security costs.
    backend_name, _, security = backend.partition("+")
    tls = security == "tls"
    out: dict[str, Any] = {"backend": backend, "hosts": hosts, "instances": count,
                           "batch": batch, "processes": processes, "variants": {}, "tls": tls}
    stack = Stack(backend_name, run_dir, placement_workers, tls=tls)
    compute: ComputeProcess | None = None
    api_cloud = api.ApiCloud(run_dir)
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

        meter = CpuMeter(lambda: {"placement": stack.placement.pid if stack.placement else None,
                                  "postgresql": stack.postgres.pid if stack.postgres else None,
                                  "etcd": stack.etcd.pid if stack.etcd else None,
                                  "compute": compute.pid if compute else None,
                                  **api_cloud.cpu_roles()})
        chosen = [v for v in all_variants(batch, processes, profile_dir, run_dir,
                                          cli_instances, api_cloud)
                  if not only or v.key in only]
        api_cloud.prepare(config, {v.key for v in chosen})
        rounds_run: dict[str, list[Round]] = {v.key: [] for v in chosen}
        floors: dict[str, list[RunResult]] = {}
        with RssSampler(compute) as sampler:
            # Interleaved: every variant's share of each round before the next round, so that
            # the machine's load (other sessions on the same cores) drifts over all of them.
            for number in range(rounds):
                for variant in chosen:
                    instances = shares(variant.instances or count, rounds)[number]
                    say(f"{backend}: ({variant.key}) {variant.title}: {instances} instances"
                        f"{f' (round {number + 1} of {rounds})' if rounds > 1 else ''}")
                    done = run_round(variant, config, instances, store, placement, meter,
                                     fake_dir, project)
                    rounds_run[variant.key].append(done)
                    say(f"{backend}: ({variant.key}) {done.rate:.1f}/s, 409s "
                        f"{done.result.conflicts}; checks ok")
                    if variant.key == "c":
                        # Placement's floor in the same round, on (c)'s placements: a floor
                        # measured once after every variant saw another load than they did
                        # (other sessions share the cores) and made the ratios noise.
                        for name, size in floor_sizes(batch):
                            floors.setdefault(name, []).append(
                                placement_floor(config, done.result.placed, size, store,
                                                placement, project))
                            say(f"{backend}: Placement floor, {name} ({size} per request): "
                                f"{_rate(floors[name][-1]):.1f}/s")
        for variant in chosen:
            out["variants"][variant.key] = merge_rounds(variant.title, rounds_run[variant.key])
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

        say(f"{backend}: schedule.py's own start ({cli_start.RUNS} runs of "
            "`schedule.py UUID`, one at a time, and its imports)")
        out["cli_start"] = cli_start.measure(write_config(run_dir, "schedule-start", config))

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

        for name, results in floors.items():
            merged = RunResult()
            for result in results:
                merged.merge(result)
                merged.wall_seconds += result.wall_seconds
            out.setdefault("floor", {})[name] = stats.summarize(merged)
            out["floor"][name].update(
                batch=dict(floor_sizes(batch))[name],
                rounds=[{"instances": len(r.placed), "wall_seconds": r.wall_seconds,
                         "instances_per_second": _rate(r)} for r in results])
        store.close()
    finally:
        api_cloud.stop()
        if api_cloud.rss:
            out["api_rss"] = api_cloud.rss
        if compute is not None:
            compute.stop()
        stack.stop()
    return out


def floor_sizes(batch: int) -> tuple[tuple[str, int], ...]:
    """Placement's floors: their names and claims per request."""
    return (("post_batched", batch), ("put_sequential", 1))


def placement_floor(config: dict[str, Any], placed: list[Any], size: int, store: Store,
                    placement: PlacementClient, project: str) -> RunResult:
    """The same placements claimed straight into Placement, `size` per request; wiped."""
    result = floor.claim_batches(config, placed, size)
    verify.wipe(store, placement, [p.uuid for p in result.placed], project, None)
    return result


def _rate(result: RunResult) -> float:
    return len(result.placed) / result.wall_seconds if result.wall_seconds else 0.0


def _create_to_building(rounds: list[Round]) -> dict[str, Any]:
    samples = [x for done in rounds for x in done.create_to_building]
    if not samples:
        return {}
    return {"create_to_building_ms": {"count": len(samples),
                                      "p50": _ms(stats.percentile(samples, 50)),
                                      "p99": _ms(stats.percentile(samples, 99))}}


def _ms(seconds: float | None) -> float | None:
    return None if seconds is None else 1000 * seconds

"""Schedulers racing for the last capacity, on Placement with 4 gunicorn workers on PostgreSQL.

Several workers serve claims in parallel, so Placement's generation checks
(with allocation_conflict_retry_count = 1) are what keeps two claims from
both taking the last unit; our schedulers must re-plan on 409 and end with a
placement elsewhere or NO ALLOCATIONS LEFT, never with more claimed than exists.
"""

from __future__ import annotations

import subprocess
import sys
import uuid as uuidlib
from collections import Counter
from typing import Any

import pytest

from etcd_compute import config as configuration
from etcd_compute import defaults
from etcd_compute.errors import ConflictError, NoValidHost
from etcd_compute.placement import PlacementClient
from tests.scheduler.conftest import add_host
from tests.support import REPO, racing_processes

pytestmark = pytest.mark.postgres

RACERS = 12
QUERY = "resources=VCPU:1,MEMORY_MB:128"


@pytest.fixture
def race_config(pg_placement, etcd_config) -> dict[str, Any]:
    overrides = {
        "etcd": etcd_config,
        "placement": {"endpoint": pg_placement.endpoint, "token": "admin", "timeout": 30.0},
        # Everyone picks the same best host: the worst case for collisions. The race is
        # for VCPU on fake hosts: no libvirt driver needs the other classes here.
        "scheduler": {"host_subset_size": 1, "claim_retries": 8, "required_resources": []},
    }
    config = configuration.deep_merge(defaults.SCHEDULE_DEFAULTS, overrides)
    configuration.validate(config, "schedule_config", "race config")
    return config


def racer(config: dict[str, Any], barrier: Any, results: Any,
          group: tuple[str, str] | None = None) -> None:
    """One scheduler process: wait for the others, then ask for one instance."""
    from etcd_compute.scheduler import RequestSpec, Scheduler

    scheduler = Scheduler(config)
    spec = RequestSpec.build(QUERY, group=group)
    scheduler.store.get(scheduler.store.keys.prefix + "/warm-up")  # connect before the start
    scheduler.placement.check()
    barrier.wait(timeout=60)
    try:
        (destination,) = scheduler.select_destinations(spec)
        results.put(("placed", destination.host, scheduler.replans))
    except NoValidHost as exc:
        results.put(("no valid host", exc.reasons[0], scheduler.replans))
    except ConflictError as exc:
        results.put(("conflict", str(exc), scheduler.replans))
    except Exception as exc:  # reported, and fails the test
        results.put(("crash", repr(exc), scheduler.replans))


def race(config: dict[str, Any], racers: int,
         group: tuple[str, str] | None = None) -> list[tuple[str, str, int]]:
    context = racing_processes(__name__)
    barrier, results = context.Barrier(racers), context.Queue()
    processes = [context.Process(target=racer, args=(config, barrier, results, group))
                 for _ in range(racers)]
    for process in processes:
        process.start()
    outcomes = [results.get(timeout=120) for _ in processes]
    for process in processes:
        process.join(30)
    return outcomes


def claimed(client: PlacementClient, hosts: list[str]) -> int:
    return sum(client.get_usages(host).get("VCPU", 0) for host in hosts)


def test_library_schedulers_race_for_last_capacity(race_config, store):
    client = PlacementClient(race_config["placement"])
    hosts = [add_host(client, store, f"race-{uuidlib.uuid4().hex[:6]}",
                      totals={"VCPU": 2, "MEMORY_MB": 1024}) for _ in range(2)]
    outcomes = race(race_config, RACERS)
    kinds = Counter(kind for kind, _, _ in outcomes)
    assert kinds["crash"] == 0, outcomes
    assert kinds["placed"] == 4, outcomes
    assert kinds["placed"] + kinds["no valid host"] + kinds["conflict"] == RACERS
    assert claimed(client, hosts) == 4
    assert Counter(host for kind, host, _ in outcomes if kind == "placed") == \
        Counter(dict.fromkeys(hosts, 2))
    specs, _ = store.get_prefix(store.keys.hosts(), keys_only=True)
    assert sum(1 for e in specs if store.keys.parse_spec(e.key)) == 4
    for kind, detail, _ in outcomes:
        if kind == "no valid host":
            assert detail.startswith("resources=VCPU:1: no resource provider has any VCPU free")
    # Print the figures for the report (pytest -s shows them).
    print(f"\nrace: {dict(kinds)}, re-plans: {sum(r for _, _, r in outcomes)}")


def test_anti_affinity_race_never_doubles_up_a_host(race_config, store):
    """Placement has room for all; only the etcd group compare keeps members apart."""
    client = PlacementClient(race_config["placement"])
    hosts = [add_host(client, store, f"aa-race-{uuidlib.uuid4().hex[:6]}",
                      totals={"VCPU": 64, "MEMORY_MB": 65536}) for _ in range(3)]
    outcomes = race(race_config, 8, group=("race-group", "anti-affinity"))
    kinds = Counter(kind for kind, _, _ in outcomes)
    assert kinds["crash"] == 0, outcomes
    placed = [host for kind, host, _ in outcomes if kind == "placed"]
    assert sorted(placed) == sorted(hosts), outcomes
    # Losers' claims were undone: exactly one instance's worth on each host.
    assert [client.get_usages(h)["VCPU"] for h in hosts] == [1, 1, 1]
    for kind, detail, _ in outcomes:
        assert kind == "placed" or (kind == "no valid host" and detail.startswith(
            "AntiAffinityFilter removed")) or kind == "conflict", (kind, detail)
    print(f"\nanti-affinity race: {dict(kinds)}, re-plans: {sum(r for _, _, r in outcomes)}")


def test_cli_schedulers_race_for_last_capacity(race_config, store, write_yaml):
    client = PlacementClient(race_config["placement"])
    hosts = [add_host(client, store, f"cli-race-{i}", totals={"VCPU": 3, "MEMORY_MB": 1024})
             for i in range(1)]
    path = write_yaml("race.yaml", race_config)
    processes = [subprocess.Popen([sys.executable, str(REPO / "schedule.py"), "--config",
                                   str(path), QUERY], cwd=REPO, text=True,
                                  stdout=subprocess.PIPE, stderr=subprocess.PIPE)
                 for _ in range(8)]
    runs = [(p.wait(60), *p.communicate()) for p in processes]
    placed = [out for code, out, _ in runs if code == 0]
    assert len(placed) == 3, runs
    assert all(out.startswith(f"NOTIFIED TARGET, {hosts[0]}, OF INSTANCE ") for out in placed)
    for code, out, err in runs:
        if code != 0:
            assert code == 1 and out.startswith("NO ALLOCATIONS LEFT\n") and not err, (out, err)
    assert claimed(client, hosts) == 3

"""Schedulers racing on the hosts' own accounts of their capacity (scheduler/hostview.py):
no candidates query, the claim is Placement's check. On real Placement, with one worker
(SQLite) and with four on PostgreSQL (claims served in parallel): whatever the accounts
say, and however stale, nothing is ever claimed beyond a host's capacity, each placed
instance has exactly one claim and one spec, and a request that finds no room ends in
NO ALLOCATIONS LEFT (or a conflict after its retries), never in a half-claimed state.
"""

from __future__ import annotations

import time
import uuid as uuidlib
from collections import Counter
from typing import Any

import pytest

from etcd_compute import config as configuration
from etcd_compute import defaults, hosts, messages
from etcd_compute.errors import ConflictError, NoValidHost
from etcd_compute.placement import PlacementClient
from tests.conftest import wipe_placement
from tests.scheduler.conftest import add_host
from tests.support import racing_processes

QUERY = "resources=VCPU:1,MEMORY_MB:128,DISK_GB:1"
ONE = {"VCPU": 1, "MEMORY_MB": 128, "DISK_GB": 1}


@pytest.fixture(params=["sqlite", pytest.param("postgresql", marks=pytest.mark.postgres)])
def backend(request: pytest.FixtureRequest) -> dict[str, Any]:
    """Placement's config: the session's (SQLite, one worker) or four workers on PostgreSQL."""
    if request.param == "sqlite":
        config = request.getfixturevalue("placement_config")
    else:
        config = request.getfixturevalue("pg_placement").client_config()
    wipe_placement(PlacementClient(config))
    return config


@pytest.fixture
def race_config(backend: dict[str, Any], etcd_config: dict[str, Any]) -> dict[str, Any]:
    config = configuration.deep_merge(defaults.SCHEDULE_DEFAULTS, {
        "etcd": etcd_config, "placement": backend,
        # Everyone picks the best host: the worst case for collisions.
        "scheduler": {"host_subset_size": 1, "claim_retries": 8,
                      "default_image": "file:///dev/null", "etcd_max_txn_ops": 4096}})
    configuration.validate(config, "schedule_config", "race config")
    return config


def racer(config: dict[str, Any], requests: int, barrier: Any, results: Any) -> None:
    """One scheduler process: wait for the others, then ask for one instance at a time
    until it has asked `requests` times or nothing fits."""
    from etcd_compute.scheduler import RequestSpec, Scheduler

    scheduler = Scheduler(config)
    scheduler.store.get(scheduler.store.keys.prefix + "/warm-up")  # connect before the start
    scheduler.placement.check()
    barrier.wait(timeout=120)
    outcomes: list[tuple[str, str]] = []
    try:
        for _ in range(requests):
            try:
                (destination,) = scheduler.select_destinations(RequestSpec.build(QUERY))
            except NoValidHost as exc:
                outcomes.append(("no valid host", exc.reasons[0] if exc.reasons else ""))
                break
            except ConflictError as exc:
                outcomes.append(("conflict", str(exc)))
                continue
            outcomes.append(("placed", destination.host))
    except Exception as exc:  # reported, and fails the test
        outcomes.append(("crash", repr(exc)))
    results.put((outcomes, scheduler.planned_on_view, scheduler.view_passed_on,
                 scheduler.placement.conflicts))
    scheduler.close()


def race(config: dict[str, Any], racers: int, requests: int) -> dict[str, Any]:
    context = racing_processes(__name__)
    barrier, results = context.Barrier(racers), context.Queue()
    processes = [context.Process(target=racer, args=(config, requests, barrier, results))
                 for _ in range(racers)]
    for process in processes:
        process.start()
    answers = [results.get(timeout=300) for _ in processes]
    for process in processes:
        process.join(30)
    outcomes = [outcome for answer in answers for outcome in answer[0]]
    return {"outcomes": outcomes,
            "kinds": Counter(kind for kind, _ in outcomes),
            "on_view": sum(answer[1] for answer in answers),
            "passed_on": sum(answer[2] for answer in answers),
            "conflicts": sum(answer[3] for answer in answers)}


def usage(client: PlacementClient, host: str) -> dict[str, int]:
    return {rc: n for rc, n in client.get_usages(host).items() if n}


def stale_account(store: Any, client: PlacementClient, rp: str) -> None:
    """An account that says the host is empty and is never updated (no compute runs)."""
    inventory = {rc: {"min_unit": 1, "max_unit": inv["total"], "step_size": 1,
                      "total": inv["total"], "reserved": inv["reserved"],
                      "allocation_ratio": inv["allocation_ratio"]}
                 for rc, inv in client.get_inventories(rp).items()}
    hosts.put_stats(store, rp, {"capacity": {"inventory": inventory, "used": {},
                                             "instances": 0, "as_of": 0,
                                             "traits": sorted(client.get_traits(rp))}})


def check_exact(client: PlacementClient, store: Any, hosts_: list[str], slots: int,
                result: dict[str, Any]) -> None:
    """Exactly `slots` placed, each host at its capacity and no more, one spec per claim."""
    kinds, outcomes = result["kinds"], result["outcomes"]
    assert kinds["crash"] == 0, outcomes
    assert kinds["placed"] == slots, outcomes
    placed = Counter(detail for kind, detail in outcomes if kind == "placed")
    per_host = slots // len(hosts_)
    assert placed == Counter(dict.fromkeys(hosts_, per_host)), outcomes
    for host in hosts_:
        assert usage(client, host) == {rc: n * per_host for rc, n in ONE.items()}
    specs, _ = store.get_prefix(store.keys.hosts(), keys_only=True)
    assert sum(1 for e in specs if store.keys.parse_spec(e.key)) == slots
    for kind, detail in outcomes:
        if kind == "no valid host":
            assert detail.startswith("resources="), detail


def test_racing_clients_on_stale_accounts_never_claim_beyond_capacity(race_config, store):
    """The worst lag: every account says its host is empty, whatever is claimed. Twelve
    processes ask for one instance each, twice; four fit. Each refused claim goes to the
    next alternate, then to Placement's candidates, which say when nothing is left."""
    client = PlacementClient(race_config["placement"])
    rps = [add_host(client, store, f"stale-{uuidlib.uuid4().hex[:6]}",
                    totals={"VCPU": 2, "MEMORY_MB": 1024, "DISK_GB": 10}) for _ in range(2)]
    for rp in rps:
        stale_account(store, client, rp)
    result = race(race_config, racers=12, requests=2)
    check_exact(client, store, rps, 4, result)
    assert result["on_view"] >= 1 and result["conflicts"] >= 1, result  # the path raced
    assert result["passed_on"] >= 1, result
    print(f"\nstale accounts: {dict(result['kinds'])}, planned on the accounts "
          f"{result['on_view']}, sent on to Placement {result['passed_on']}, "
          f"409s {result['conflicts']}")


def test_racing_clients_fill_live_hosts_exactly_and_their_accounts_match_placement(
        race_config, fake_hosts_config, start_compute, store):
    """A real compute (3 simulated hosts, 4 instances each) publishes its accounts as specs
    arrive; 8 processes ask until nothing fits. 12 placed, no more, all built; then every
    host's account says what Placement holds for it."""
    client = PlacementClient(race_config["placement"])
    compute = start_compute(configuration.deep_merge(fake_hosts_config, {
        "placement": race_config["placement"],
        "compute": {"inventory": {"VCPU": {"total": 4}, "MEMORY_MB": {"total": 2048},
                                  "DISK_GB": {"total": 20}}}}), "--fake-hosts", "3")
    deadline = time.monotonic() + 60
    while len(hostview_accounts(store)) < 3:
        assert compute.alive() and time.monotonic() < deadline, compute.log()[-2000:]
        time.sleep(0.1)
    rps = sorted(hostview_accounts(store))
    result = race(race_config, racers=8, requests=3)
    check_exact(client, store, rps, 12, result)
    assert result["on_view"] >= 6, result  # most were placed without a candidates query
    deadline = time.monotonic() + 60
    while True:
        accounts = hostview_accounts(store)
        if all(accounts[rp]["used"] == usage(client, rp) and accounts[rp]["instances"] == 4
               for rp in rps):
            break
        assert time.monotonic() < deadline, (accounts, [usage(client, rp) for rp in rps])
        time.sleep(0.2)
    while True:  # and the compute built every one of them
        records = {u: r for rp in rps for u, r in
                   store.read_prefix(messages.INSTANCE_RECORD, store.keys.records(rp)).items()}
        if len(records) == 12 and all(r["state"] == "ACTIVE" for r in records.values()):
            break
        assert time.monotonic() < deadline, records
        time.sleep(0.2)
    print(f"\nlive accounts: {dict(result['kinds'])}, planned on the accounts "
          f"{result['on_view']}, sent on to Placement {result['passed_on']}, "
          f"409s {result['conflicts']}, records {Counter(r['state'] for r in records.values())}")


def hostview_accounts(store: Any) -> dict[str, dict[str, Any]]:
    """Every host's published account (live or not), by provider uuid."""
    return {rp: stats["capacity"] for rp, stats in
            store.read_prefix(messages.HOST_STATS, store.keys.stats_prefix()).items()
            if "capacity" in stats}

"""After every variant: wait for the computes, check correctness, wipe back to empty.

Correctness (a violation raises CheckFailed, which fails the whole run):
- Placement: no provider uses more than (total - reserved) * allocation_ratio
  of any class, and the consumers holding allocations are exactly the
  instances the variant says it placed, each on the provider it said;
- etcd: every placed instance's spec is under `/hosts/<its provider>/`, its
  record is ACTIVE on that provider, and the fake driver holds the instance
  (the compute acted on it).
"""

from __future__ import annotations

import shutil
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from bench.placements import Placed
from etcd_compute import messages
from etcd_compute.errors import InvalidMessage
from etcd_compute.etcd import Store
from etcd_compute.keys import RECORDS
from etcd_compute.placement import PlacementClient

THREADS = 8
# Not /stats/: the hosts' accounts of their capacity live there (compute/capacity.py), and
# a host publishes its own again only when its specs change (or at its inventory refresh):
# wiped, every request would go to Placement's candidates until then.
WIPED_PREFIXES = ("/hosts/", "/instances/", "/groups/", "/controller/", "/queue/",
                  "/servers/", "/quota-reservations/")


class CheckFailed(Exception):
    """A correctness check failed: the benchmark run must exit non-zero."""


def records(store: Store) -> dict[str, dict[str, Any]]:
    entries, _ = store.get_prefix(store.keys.hosts())
    found = {}
    for entry in entries:
        parsed = store.keys.parse_host_key(entry.key)
        if parsed is None or parsed.kind != RECORDS:
            continue
        try:
            found[entry.key.rsplit("/", 1)[-1]] = messages.decode(messages.INSTANCE_RECORD,
                                                                  entry.value)
        except InvalidMessage as exc:
            raise CheckFailed(f"unreadable record {entry.key}: {exc}") from None
    return found


def wait_active(store: Store, placed: list[Placed], timeout: float) -> float:
    """Seconds until every placed instance is ACTIVE; CheckFailed on ERROR or timeout."""
    wanted = {p.uuid for p in placed}
    started = time.monotonic()
    states: Counter[str] = Counter()
    while time.monotonic() - started < timeout:
        found = records(store)
        states = Counter(found[u]["state"] if u in found else "(no record)" for u in wanted)
        errors = [u for u in wanted if u in found and found[u]["state"] == "ERROR"]
        if errors:
            raise CheckFailed(f"{len(errors)} instance(s) ended ERROR, e.g. {errors[0]}: "
                              f"{found[errors[0]].get('error')}")
        if states["ACTIVE"] == len(wanted):
            return time.monotonic() - started
        time.sleep(0.25)
    raise CheckFailed(f"instances not all ACTIVE after {timeout:.0f} s: {dict(states)}")


def placement_usage(placement: PlacementClient) -> dict[str, Any]:
    """Per provider: inventory, usage summed from its allocations, its consumers."""
    providers = [p["uuid"] for p in placement.list_providers()]

    def read(rp: str) -> tuple[str, dict[str, Any], dict[str, Any]]:
        inventory = placement.get_inventories(rp)
        allocations = placement.get(f"/resource_providers/{rp}/allocations")["allocations"]
        return rp, inventory, allocations

    with ThreadPoolExecutor(THREADS) as pool:
        rows = list(pool.map(read, providers))
    return {rp: {"inventory": inv, "allocations": allocs} for rp, inv, allocs in rows}


def check(store: Store, placement: PlacementClient, placed: list[Placed],
          fake_instances_dir: Path) -> dict[str, Any]:
    """Run every check; returns a summary, raises CheckFailed on the first violation."""
    usage = placement_usage(placement)
    over, consumers = [], {}
    hosts_used = 0
    for rp, row in usage.items():
        used: Counter[str] = Counter()
        for consumer, allocation in row["allocations"].items():
            consumers[consumer] = rp
            used.update(allocation["resources"])
        hosts_used += bool(row["allocations"])
        for rc, amount in used.items():
            inv = row["inventory"].get(rc)
            capacity = (inv["total"] - inv["reserved"]) * inv["allocation_ratio"] if inv else 0
            if amount > capacity:
                over.append(f"{rp} {rc}: {amount} > {capacity:g}")
    if over:
        raise CheckFailed(f"{len(over)} provider(s) over capacity, e.g. {over[0]}")
    wanted = {p.uuid: p.host for p in placed}
    if len(wanted) != len(placed):
        raise CheckFailed("an instance uuid was placed twice")
    stray = set(consumers) - set(wanted)
    missing = set(wanted) - set(consumers)
    if stray or missing:
        raise CheckFailed(f"Placement consumers differ from the placed instances: "
                          f"{len(stray)} unexpected, {len(missing)} missing")
    moved = [u for u, rp in wanted.items() if consumers[u] != rp]
    if moved:
        raise CheckFailed(f"{len(moved)} instance(s) claimed elsewhere than their spec says")
    found = records(store)
    entries, _ = store.get_prefix(store.keys.hosts(), keys_only=True)
    spec_keys = {entry.key for entry in entries}
    built = {path.stem for path in fake_instances_dir.glob("*.json")}
    for uuid, rp in wanted.items():
        if store.keys.spec(rp, uuid) not in spec_keys:
            raise CheckFailed(f"spec of {uuid} not under /hosts/{rp}/specs/")
        record = found.get(uuid)
        if record is None or record["state"] != "ACTIVE" or record["host"] != rp:
            raise CheckFailed(f"record of {uuid} is {record} (expected ACTIVE on {rp})")
        if uuid not in built:
            raise CheckFailed(f"the compute never built {uuid}")
    return {"providers": len(usage), "providers_used": hosts_used, "instances": len(wanted),
            "over_capacity": 0, "records_active": len(wanted), "consumers": sorted(consumers)}


def queue_empty(store: Store) -> None:
    """Every request sent through the scheduler service was answered, and every answer
    collected: nothing lost, nothing left behind."""
    left, _ = store.get_prefix(store.keys.queue_requests(), keys_only=True)
    answers, _ = store.get_prefix(store.keys.prefix + "/queue/answers/", keys_only=True)
    if left or answers:
        raise CheckFailed(f"{len(left)} request(s) and {len(answers)} answer(s) left in the "
                          "scheduler service's queue")


def project_usages(placement: PlacementClient, project_id: str) -> dict[str, int]:
    """GET /usages at microversion 1.9: at 1.38+ (consumer types) Placement on
    PostgreSQL answers 500 (a GROUP BY error) when the project has no allocations."""
    response = placement.session.get(
        f"{placement.endpoint}/usages", params={"project_id": project_id},
        headers={"openstack-api-version": "placement 1.9"}, timeout=placement.timeout,
        verify=placement.verify, cert=placement.cert)  # as the client's own requests
    response.raise_for_status()
    return response.json()["usages"]


def wipe(store: Store, placement: PlacementClient, consumers: list[str], project_id: str,
         fake_instances_dir: Path | None) -> None:
    """Back to the empty state: no allocations, no instance keys, no driver instances."""
    with ThreadPoolExecutor(THREADS) as pool:
        list(pool.map(placement.delete_allocations, consumers))
    for prefix in WIPED_PREFIXES:
        with store.errors():
            store.client.delete_prefix(store.keys.prefix + prefix)
    if fake_instances_dir is not None and fake_instances_dir.exists():
        # File by file: the compute removes the same files as it sees the specs go (a file
        # gone meanwhile is what we wanted), and a build it finishes meanwhile writes one
        # (rmtree stopped at either: FileNotFoundError, "Directory not empty").
        for path in fake_instances_dir.iterdir():
            if path.is_dir():
                shutil.rmtree(path, ignore_errors=True)
            else:
                path.unlink(missing_ok=True)
    usages = project_usages(placement, project_id)
    if any(usages.values()):
        raise CheckFailed(f"allocations left after the wipe: {usages}")

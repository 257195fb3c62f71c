"""The operator's instance commands over etcd and Placement: show, destroy, list, hosts,
console, wait. `schedule.py` is a thin layer over these."""

from __future__ import annotations

import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from etcd_compute import instances, messages
from etcd_compute.errors import EtcdComputeError, InvalidMessage, NotFound, UsageError
from etcd_compute.etcd import Store
from etcd_compute.placement import DISABLED_TRAIT, PlacementClient
from etcd_compute.scheduler.request import UUID


class WaitTimeout(EtcdComputeError):
    """--wait ran out of time; the instances keep going."""


def check_uuid(text: str) -> str:
    if not UUID.match(text):
        raise UsageError(f"{text!r} is not an instance uuid")
    return text


def read_record(store: Store, uuid: str) -> dict[str, Any] | None:
    """The record of `uuid`, or None (absent or unreadable)."""
    return instances.read_record(store, uuid).record


def show(store: Store, uuid: str) -> dict[str, Any]:
    """The instance record (plus the /booted IP); NotFound if there is none."""
    check_uuid(uuid)
    record = read_record(store, uuid)
    if record is None:
        raise NotFound(f"no instance {uuid} (never scheduled, or deleted and expired)")
    booted = store.get(store.keys.booted(uuid))
    if booted is not None and not record.get("ip"):
        record = {**record, "ip": booted.value.decode(errors="replace")}
    return record


def destroy(store: Store, placement: PlacementClient, uuid: str) -> str:
    """Ask the host to destroy `uuid`, or clean up an instance no host holds.

    Returns what was done: "requested" (host key rewritten with action destroy),
    "already" (a destroy is pending), "removed" (no host key: record and claim
    removed here), "deleted" (nothing left to do).
    """
    check_uuid(uuid)
    for _ in range(5):
        record = read_record(store, uuid)
        entry = instances.find_spec(store, uuid, record)
        if entry is not None:
            try:
                spec = messages.decode(messages.INSTANCE_SPEC, entry.value)
            except InvalidMessage:
                # Unreadable spec: the compute rejects it anyway; drop it and clean up.
                instances.drop_key(store, entry.key, entry.mod_revision)
                continue
            if spec["action"] == "destroy":
                return "already"
            if instances.request_destroy(store, entry, spec) is not None:
                return "requested"
            continue  # the spec moved under us (compute took it, or another destroy): re-read
        if record is None:
            raise NotFound(f"no instance {uuid} (never scheduled, or deleted and expired)")
        if record["state"] == instances.DELETED:
            return "deleted"
        # ERROR (the compute removed its host key), or a record whose host is gone:
        # nothing will act on it, so free its claim and drop its keys here.
        placement.delete_allocations(uuid)
        instances.remove(store, uuid, record)
        return "removed"
    raise UsageError(f"instance {uuid} kept changing while destroying it; try again")


def list_instances(store: Store) -> list[dict[str, Any]]:
    found = store.read_prefix(messages.INSTANCE_RECORD, store.keys.instances())
    return sorted(found.values(), key=lambda r: (r.get("created_at") or 0, r["uuid"]))


def console(store: Store, uuid: str) -> str:
    check_uuid(uuid)
    try:
        message, _ = store.read(messages.CONSOLE, store.keys.console(uuid))
    except InvalidMessage:
        message = None
    if message is not None:
        return message["text"]
    record = read_record(store, uuid)
    if record is None:
        raise NotFound(f"no instance {uuid}")
    raise NotFound(f"console of {uuid} not published yet (state {record['state']}); "
                   "the compute publishes it once the instance is ACTIVE")


def hosts(store: Store, placement: PlacementClient) -> list[dict[str, Any]]:
    """Every provider: capacity and usage per class, alive, disabled, instances."""
    providers = placement.list_providers()
    alive = store.read_prefix(messages.ALIVE, store.keys.alive_prefix())
    counts = instances.count_by_host(store)

    def describe(provider: dict[str, Any]) -> dict[str, Any]:
        uuid = provider["uuid"]
        inventories = placement.get_inventories(uuid)
        usages = placement.get_usages(uuid)
        resources = {
            rc: {"capacity": int((inv["total"] - inv["reserved"]) * inv["allocation_ratio"]),
                 "used": usages.get(rc, 0)}
            for rc, inv in inventories.items()
        }
        return {"uuid": uuid, "name": provider["name"], "alive": uuid in alive,
                "disabled": DISABLED_TRAIT in placement.get_traits(uuid),
                "instances": counts.get(uuid, 0), "resources": resources}

    with ThreadPoolExecutor(max_workers=8) as pool:
        described = list(pool.map(describe, providers))
    return sorted(described, key=lambda h: (h["name"], h["uuid"]))


def wait(store: Store, uuids: list[str], until: frozenset[str], timeout: float,
         on_change: Callable[[str, dict[str, Any] | None], None],
         interval: float = 0.2) -> dict[str, dict[str, Any] | None]:
    """Poll the records of `uuids` until each is in a state of `until` (or gone).

    `on_change(uuid, record)` is called on every state change (None: record gone).
    Returns the last records; WaitTimeout when `timeout` passes first.
    """
    last: dict[str, dict[str, Any] | None] = {}
    seen: dict[str, str | None] = {}
    pending = list(uuids)
    deadline = time.monotonic() + timeout
    while pending:
        for uuid in list(pending):
            record = read_record(store, uuid)
            state = record["state"] if record else None
            if uuid not in seen or seen[uuid] != state:
                seen[uuid] = state
                on_change(uuid, record)
            last[uuid] = record
            if record is None or state in until:
                pending.remove(uuid)
        if pending:
            if time.monotonic() > deadline:
                raise WaitTimeout(f"{len(pending)} instance(s) still not done after {timeout:g} s "
                                  f"({', '.join(sorted(str(seen[u]) for u in pending))}); "
                                  "they go on without us")
            time.sleep(interval)
    return last

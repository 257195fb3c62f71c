"""The operator's instance commands over etcd and Placement: show, destroy, list, hosts,
console, wait. `schedule.py` is a thin layer over these."""

from __future__ import annotations

import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from etcd_compute import claims, messages, remote_consoles
from etcd_compute.defaults import DELETED_RECORD_TTL
from etcd_compute.errors import EtcdComputeError, InvalidMessage, NotFound, UsageError
from etcd_compute.etcd import Store
from etcd_compute.hosts import console_address, heartbeats, is_alive
from etcd_compute.instances import actions as action_txn
from etcd_compute.instances import moves, ownership, records, states
from etcd_compute.keys import RECORDS
from etcd_compute.placement import DISABLED_TRAIT, PlacementClient
from etcd_compute.scheduler.request import UUID
from etcd_compute.scheduler.spec import operator_name


class WaitTimeout(EtcdComputeError):
    """--wait ran out of time; the instances keep going."""


def check_uuid(text: str) -> str:
    if not UUID.match(text):
        raise UsageError(f"{text!r} is not an instance uuid")
    return text


def read_record(store: Store, uuid: str) -> dict[str, Any] | None:
    """The record of `uuid` wherever it is, or None (unknown, or unreadable)."""
    return records.find(store, uuid)[1].record


def _gone(uuid: str) -> NotFound:
    return NotFound(f"no instance {uuid} (never scheduled, or deleted and expired)")


def where(store: Store, uuid: str) -> tuple[str, str | None, records.RecordRead]:
    """(host, group, record) of `uuid`; NotFound when it is known nowhere. A location whose
    host kept nothing of the instance (it ended and its record expired) is dropped here."""
    location = records.locate(store, uuid)
    if location is None:
        host, read = records.find(store, uuid)
        if host is None:
            raise _gone(uuid)
        return host, (read.record or {}).get("group"), read
    read = records.read_record(store, location["host"], uuid)
    if read.record is None and read.fault is None and \
            store.get(store.keys.spec(location["host"], uuid)) is None:
        ownership.forget(store, uuid, location["host"], location.get("group"))
        raise _gone(uuid)
    return location["host"], location.get("group"), read


def show(store: Store, uuid: str) -> dict[str, Any]:
    """The instance record (plus the /booted IP); NotFound if there is none."""
    check_uuid(uuid)
    host, _group, read = where(store, uuid)
    if read.record is None:
        raise _gone(uuid)
    record = read.record
    booted = store.get(store.keys.booted(host, uuid))
    if booted is not None and not record.get("ip"):
        record = {**record, "ip": booted.value.decode(errors="replace")}
    return record


def destroy(store: Store, placement: PlacementClient, uuid: str,
            deleted_record_ttl: int = DELETED_RECORD_TTL, by: str | None = None) -> str:
    """Ask the host to destroy `uuid`, or clean up an instance no host holds.

    Returns what was done: "requested" (the host's spec rewritten with action destroy),
    "already" (a destroy is pending), "removed" (no spec: record, keys and claim
    removed here), "deleted" (nothing left to do), "finished" (its host is down: the
    record ends DELETED, for `deleted_record_ttl` s, with the instance's other keys,
    and the claim is freed here; the host cleans up if it returns). `by`: who asks, if
    not this process's operator (the compute API's caller).
    """
    check_uuid(uuid)
    for _ in range(5):
        host, group, read = where(store, uuid)
        hold = (read.record or {}).get("resize_hold")
        if hold:  # a resize awaiting its confirm: confirmed by the destroy, as Nova does
            claims.release_hold(placement, hold["consumer"])
        entry, spec = records.read_spec(store, host, uuid)
        if entry is not None:
            if spec is None:
                # Unreadable spec: the compute rejects it anyway; drop it and clean up.
                ownership.drop_key(store, entry.key, entry.mod_revision)
                continue
            if not is_alive(store, host) and read.record is not None:
                # Nobody would read the request: finish it here, if the host stays down
                # and the controller did not move it meanwhile; then free the claim.
                if moves.finish_destroy_on_dead_host(
                        store, spec, read, deleted_record_ttl,
                        detail=f"its host was down: finished by {operator_name()}"):
                    placement.delete_allocations(uuid)
                    ownership.expire_with_record(store, uuid)
                    return "finished"
                continue  # it came back or moved meanwhile: look again
            if spec["action"] == "destroy":
                return "already"
            if action_txn.request_destroy(store, entry, spec, by or operator_name()) is not None:
                return "requested"
            continue  # the spec moved under us (compute took it, or another destroy): re-read
        if read.state == states.DELETED:
            return "deleted"
        # ERROR (the compute removed its spec), or a record whose host is gone:
        # nothing will act on it, so free its claim and drop its keys here.
        placement.delete_allocations(uuid)
        ownership.remove(store, uuid, host, group)
        return "removed"
    raise UsageError(f"instance {uuid} kept changing while destroying it; try again")


def destroyed(store: Store, uuid: str) -> None:
    """`destroy --wait` saw it DELETED: its location and group member expire with the
    record (its host could not touch them)."""
    ownership.expire_with_record(store, uuid)


def check_state(text: str) -> str:
    """The state `text` names, in any case (`--state active`); UsageError naming them all."""
    state = text.strip().upper()
    if state not in states.STATES:
        raise UsageError(f"--state {text!r}: no such state; one of {', '.join(states.STATES)}")
    return state


def hosts_named(host: str, listed: list[dict[str, Any]],
                alive: dict[str, dict[str, Any]]) -> set[str]:
    """The provider uuids `host` names: a uuid names itself; a name, every live host (`alive`,
    heartbeats by provider uuid) and every instance's host (`listed` records) of that name."""
    if UUID.match(host):
        return {host}
    named = {r["host"] for r in listed if r.get("host_name") == host and r.get("host")}
    return named | {uuid for uuid, beat in alive.items() if beat.get("name") == host}


def select(listed: list[dict[str, Any]], hosts: set[str] | None = None,
           state: str | None = None) -> list[dict[str, Any]]:
    """The records of `listed` on one of `hosts` (None: any) in `state` (None: any), in their
    order."""
    return [r for r in listed
            if (hosts is None or r.get("host") in hosts) and (state is None or r["state"] == state)]


def list_instances(store: Store, host: str | None = None,
                   state: str | None = None) -> list[dict[str, Any]]:
    """Every instance record, oldest first (locations of ended instances are dropped); only
    those on `host` (a provider uuid or name) and in `state` (a name, any case) if given.
    NotFound when `host` is neither a live host nor any instance's host."""
    wanted_state = check_state(state) if state is not None else None
    found = _all_records(store)
    hosts = None
    if host is not None:
        alive = heartbeats(store)
        hosts = hosts_named(host, found, alive)
        if not hosts & ({r.get("host") for r in found} | set(alive)):
            raise NotFound(f"no host {host!r}: neither a live host nor the host of any "
                           "instance (give its name or provider uuid)")
    return select(found, hosts, wanted_state)


def _all_records(store: Store) -> list[dict[str, Any]]:
    """Every instance record, oldest first (locations of ended instances are dropped)."""
    entries, _ = store.get_prefix(store.keys.hosts(), keys_only=True)
    hosts_with_records = set()
    for entry in entries:
        parsed = store.keys.parse_host_key(entry.key)
        if parsed is not None and parsed.kind == RECORDS:
            hosts_with_records.add(parsed.host)
    found: dict[str, dict[str, Any]] = {}
    for host in sorted(hosts_with_records):
        found.update(store.read_prefix(messages.INSTANCE_RECORD, store.keys.records(host)))
    for uuid, location in store.read_prefix(messages.INSTANCE_LOCATION,
                                            store.keys.locations()).items():
        if uuid not in found:
            ownership.forget(store, uuid, location["host"], location.get("group"))
    return sorted(found.values(), key=lambda r: (r.get("created_at") or 0, r["uuid"]))


def console(store: Store, uuid: str) -> str:
    check_uuid(uuid)
    host, read = records.find(store, uuid)
    if host is None or read.record is None:
        raise NotFound(f"no instance {uuid}")
    try:
        message, _ = store.read(messages.CONSOLE, store.keys.console(host, uuid))
    except InvalidMessage:
        message = None
    if message is not None:
        return message["text"]
    raise NotFound(f"console of {uuid} not published yet (state {read.state}); "
                   "the compute publishes it once the instance is ACTIVE")


class NoRemoteConsole(EtcdComputeError):
    """The instance's host serves no remote console (the fake driver, or no relay)."""


def serves_remote_consoles(store: Store, host: str) -> bool:
    """Whether `host` publishes a console relay (a driver with screens, console.listen)."""
    return console_address(store, host) is not None


def remote_console_url(store: Store, uuid: str, host: str, settings: dict[str, Any],
                       issued_by: str) -> str:
    """The noVNC URL of instance `uuid`'s screen on `host`, with a new single-use token
    (`console` settings: its lifetime, the proxy's base URL). NoRemoteConsole when the
    host publishes no console relay: the proxy would have nowhere to go. The one issuer of
    console URLs: the compute API and `schedule.py console --url` both come here."""
    if not serves_remote_consoles(store, host):
        raise NoRemoteConsole(f"the host of {uuid} serves no remote console (no console "
                              "relay: the fake driver, or console.listen unset)")
    token = remote_consoles.issue(store, uuid, settings["token_ttl_seconds"], issued_by)
    return remote_consoles.access_url(settings["base_url"], token)


def remote_console(store: Store, uuid: str, settings: dict[str, Any]) -> str:
    """`schedule.py console UUID --url`: the instance's noVNC URL for an operator (a new
    single-use token, as the compute API's)."""
    check_uuid(uuid)
    host, read = records.find(store, uuid)
    if host is None or read.record is None or read.state in (states.DELETED,
                                                             states.DELETING):
        raise NotFound(f"no instance {uuid}")
    if read.state in (states.SCHEDULED, states.BUILDING, states.RESCHEDULING):
        raise UsageError(f"instance {uuid} is not ready (state {read.state}): its screen "
                         "comes once it is built")
    return remote_console_url(store, uuid, host, settings, operator_name())


def hosts(store: Store, placement: PlacementClient) -> list[dict[str, Any]]:
    """Every provider: capacity and usage per class, alive (and its driver), disabled, traits,
    instances."""
    providers = placement.list_providers()
    alive = heartbeats(store)
    counts = records.count_by_host(store)

    def describe(provider: dict[str, Any]) -> dict[str, Any]:
        uuid = provider["uuid"]
        inventories = placement.get_inventories(uuid)
        usages = placement.get_usages(uuid)
        resources = {
            rc: {"capacity": int((inv["total"] - inv["reserved"]) * inv["allocation_ratio"]),
                 "used": usages.get(rc, 0)}
            for rc, inv in inventories.items()
        }
        traits = placement.get_traits(uuid)
        return {"uuid": uuid, "name": provider["name"], "alive": uuid in alive,
                "disabled": DISABLED_TRAIT in traits, "traits": sorted(traits),
                "driver": alive.get(uuid, {}).get("driver"),
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

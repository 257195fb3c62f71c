"""The compute hosts as the rest see them: heartbeats, stats, maintenance.

    /alive/<rp>        alive: bound to the host's lease (`compute/heartbeat.py` beats
                       through `beat`); a host is alive while its key exists
    /stats/<rp>        host_stats: its recent build failures (`record_build_failure`, by
                       the compute), which the scheduler weighs hosts by; its own account
                       of its capacity (`compute/capacity.py` publishes it,
                       `scheduler/hostview.py` plans on it); where its libvirtd takes its
                       peers' TLS connections (`publish_libvirt_address`, at the compute's
                       start: it outlives the host's lease, for fencing); where its
                       console relay listens (`publish_console_address`)
    /maintenance/<rp>  host_maintenance: who disabled it, when, why (`schedule.py host
                       disable`, ops/maintenance.py); the host reads it at start

One home for these keys: the scheduler (`hoststate.py`), the controller (its decisions
and host cache), the operator's commands and the compute daemon read and write them
here. An unreadable message counts as none: a heartbeat that cannot be read does not make
a host alive to the planner, though its key still says the host has not died.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from etcd_compute import messages
from etcd_compute.errors import EtcdComputeError, InvalidMessage
from etcd_compute.etcd import KeyValueStore, Range, Txn, put_message, unchanged
from etcd_compute.keys import Keys

# How many recent build failures a host reports to the scheduler.
FAILURES_KEPT = 20


def host_of(key: str) -> str:
    """The provider uuid an /alive/, /stats/ or /maintenance/ key is about."""
    return key.rsplit("/", 1)[-1]


# --- heartbeats ------------------------------------------------------------------------------


def beat(store: KeyValueStore, lease: Any, rp: str, name: str, driver: str) -> None:
    """The host's heartbeat, bound to `lease`: alive from now until the lease ends; it
    says when the machine started (Nova's hypervisor uptime) when the kernel tells."""
    message = {"host": rp, "name": name, "since": time.time(), "driver": driver}
    booted = boot_time()
    if booted is not None:
        message["booted_at"] = booted
    store.put(messages.ALIVE, store.keys.alive(rp), message, lease=lease)


def boot_time(stat: str = "/proc/stat") -> float | None:
    """When this machine started (the kernel's `btime`), or None where it is not told."""
    try:
        with open(stat) as lines:
            for line in lines:
                if line.startswith("btime "):
                    return float(line.split()[1])
    except (OSError, ValueError, IndexError):
        return None
    return None


def is_alive(store: KeyValueStore, rp: str) -> bool:
    """Whether `rp` has a heartbeat key (its lease has not ended)."""
    return store.get(store.keys.alive(rp)) is not None


def alive_hosts(store: KeyValueStore) -> set[str]:
    """The providers with a heartbeat key (one keys-only read)."""
    entries, _ = store.get_prefix(store.keys.alive_prefix(), keys_only=True)
    return {host_of(entry.key) for entry in entries}


def alive_and_disabled(store: KeyValueStore) -> tuple[set[str], set[str]]:
    """The providers with a heartbeat key and those an operator disabled (one keys-only
    read of each, at one revision)."""
    (alive, disabled), _ = store.read_many(
        [Range(store.keys.alive_prefix(), keys_only=True),
         Range(store.keys.maintenance_prefix(), keys_only=True)])
    return ({host_of(e.key) for e in alive.entries}, {host_of(e.key) for e in disabled.entries})


def count_alive(store: KeyValueStore) -> int:
    """How many providers have a heartbeat key (counted by etcd: no key is sent)."""
    (result,), _ = store.read_many([Range(store.keys.alive_prefix(), count_only=True)])
    return result.count


def heartbeats(store: KeyValueStore) -> dict[str, dict[str, Any]]:
    """Every readable heartbeat, by provider uuid."""
    return store.read_prefix(messages.ALIVE, store.keys.alive_prefix())


def heartbeat(store: KeyValueStore, rp: str) -> dict[str, Any] | None:
    """`rp`'s heartbeat, or None (no key, or unreadable)."""
    try:
        message, _ = store.read(messages.ALIVE, store.keys.alive(rp))
    except InvalidMessage:
        return None
    return message


def decode_heartbeat(value: bytes) -> dict[str, Any] | None:
    """A heartbeat read elsewhere (a range, a watch event), or None if unreadable."""
    try:
        return messages.decode(messages.ALIVE, value)
    except InvalidMessage:
        return None


def heartbeat_and_stats_ranges(keys: Keys) -> list[Range]:
    """Every host's heartbeat and stats: two ranges of one `read_many` (the scheduler sends
    it while Placement answers its candidates query)."""
    return [Range(keys.alive_prefix()), Range(keys.stats_prefix())]


def view_ranges(keys: Keys) -> list[Range]:
    """Every host's heartbeat, stats (its capacity account) and operator's disable: three
    ranges of one `read_many`, all a scheduler planning without Placement's candidates
    reads (`scheduler/hostview.py`)."""
    return [*heartbeat_and_stats_ranges(keys), Range(keys.maintenance_prefix(), keys_only=True)]


# --- stats -----------------------------------------------------------------------------------


def decode_stats(value: bytes) -> dict[str, Any] | None:
    """A host's stats read elsewhere (a range, a watch event), or None if unreadable."""
    try:
        return messages.decode(messages.HOST_STATS, value)
    except InvalidMessage:
        return None


def build_failures(store: KeyValueStore, rp: str) -> list[float]:
    """When builds recently failed on `rp` (time.time()), oldest first."""
    try:
        stats, _ = store.read(messages.HOST_STATS, store.keys.stats(rp))
    except InvalidMessage:
        stats = None
    return list((stats or {}).get("build_failures", []))


def stats(store: KeyValueStore, rp: str) -> dict[str, Any]:
    """`rp`'s stats ({} when none, or unreadable)."""
    try:
        found, _ = store.read(messages.HOST_STATS, store.keys.stats(rp))
    except InvalidMessage:
        found = None
    return dict(found or {})


def record_build_failure(store: KeyValueStore, rp: str) -> None:
    """A build failed on `rp` (the compute says so): the last FAILURES_KEPT are kept."""
    now = time.time()
    change_stats(store, rp, lambda current: {
        **current, "updated_at": now,
        "build_failures": [*current.get("build_failures", []), now][-FAILURES_KEPT:]})


def read_stats(store: KeyValueStore, rp: str) -> tuple[dict[str, Any] | None, int]:
    """`rp`'s stats and their mod_revision ((None, 0): none; (None, revision): unreadable)."""
    entry = store.get(store.keys.stats(rp))
    if entry is None:
        return None, 0
    return decode_stats(entry.value), entry.mod_revision


def publish_libvirt_address(store: KeyValueStore, rp: str, address: str | None) -> None:
    """Where `rp`'s libvirtd takes its peers' TLS connections (None: nowhere), kept in its
    stats (not its heartbeat: the controller fences a host whose heartbeat is gone)."""
    _publish_address(store, rp, "libvirt_address", address)


def libvirt_address(store: KeyValueStore, rp: str) -> str | None:
    """Where `rp` said its libvirtd takes TLS connections, if it did."""
    return stats(store, rp).get("libvirt_address")


def publish_console_address(store: KeyValueStore, rp: str, address: str | None) -> None:
    """Where `rp`'s console relay takes the console proxy's TLS connections (`HOST:PORT`;
    None: it serves no remote console)."""
    _publish_address(store, rp, "console_address", address)


def console_address(store: KeyValueStore, rp: str) -> str | None:
    """Where `rp` said its console relay listens, if it did."""
    return stats(store, rp).get("console_address")


def _publish_address(store: KeyValueStore, rp: str, field: str, address: str | None) -> None:
    def published(current: dict[str, Any]) -> dict[str, Any] | None:
        if current.get(field) == address:
            return None
        current.pop(field, None)
        return {**current, "updated_at": time.time(),
                **({field: address} if address is not None else {})}

    change_stats(store, rp, published)


# What a host publishes of itself in its stats: whoever writes build failures (the compute,
# `Scheduler.update_resource_stats`) keeps these unless it gives them.
HOST_OWNED = ("capacity", "libvirt_address", "console_address")
STATS_ATTEMPTS = 10


def put_stats(store: KeyValueStore, rp: str, stats: dict[str, Any]) -> None:
    """Write `rp`'s stats (host_stats fields; updated_at now unless given); what the host
    published of itself (`HOST_OWNED`) stays as it is unless `stats` has it."""
    change_stats(store, rp, lambda current: {
        **{key: current[key] for key in HOST_OWNED if key in current}, **stats,
        "updated_at": stats.get("updated_at", time.time())})


def change_stats(store: KeyValueStore, rp: str,
                 change: Callable[[dict[str, Any]], dict[str, Any] | None]) -> None:
    """`rp`'s stats as `change` makes them of what is there ({}: none, or unreadable; None:
    nothing to write), written only if nobody wrote them since they were read (then read
    and changed again): every writer's part is kept."""
    for _ in range(STATS_ATTEMPTS):
        current, revision = read_stats(store, rp)
        changed = change(dict(current or {}))
        if changed is None or \
                store.commit(stats_put(store, rp, changed, revision)) is not None:
            return
    raise EtcdComputeError(f"the stats of host {rp} kept changing while written; try again")


def stats_put(store: KeyValueStore, rp: str, stats: dict[str, Any], mod_revision: int) -> Txn:
    """A transaction that writes `rp`'s stats only if nobody wrote them since `mod_revision`
    (0: only if there are none): the compute publishes its capacity account without
    erasing build failures written meanwhile."""
    key = store.keys.stats(rp)
    return Txn([unchanged(key, mod_revision)], [put_message(messages.HOST_STATS, key, stats)])


def capacity_of(stats: dict[str, Any] | None) -> dict[str, Any] | None:
    """The host's account of its capacity in its stats, or None."""
    return (stats or {}).get("capacity")


# --- maintenance -----------------------------------------------------------------------------


def maintenance(store: KeyValueStore, rp: str) -> dict[str, Any] | None:
    """Why an operator disabled `rp` (who, when, whether to drain it), or None (not
    disabled, or unreadable)."""
    try:
        message, _ = store.read(messages.HOST_MAINTENANCE, store.keys.maintenance(rp))
    except InvalidMessage:
        return None
    return message


def under_maintenance(store: KeyValueStore, rp: str) -> bool:
    """Whether an operator disabled `rp` (its maintenance key exists, readable or not)."""
    return store.get(store.keys.maintenance(rp)) is not None


def disable(store: KeyValueStore, rp: str, message: dict[str, Any]) -> None:
    """Record an operator's disable of `rp` (host_maintenance)."""
    store.put(messages.HOST_MAINTENANCE, store.keys.maintenance(rp), message)


def enable(store: KeyValueStore, rp: str) -> None:
    """Forget `rp`'s disable."""
    store.delete(store.keys.maintenance(rp))

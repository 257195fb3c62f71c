"""This host's own account of its capacity, published in its /stats/<rp> for schedulers.

A scheduler that plans a plain resources query on the hosts' accounts (one etcd
read, `scheduler/hostview.py`) skips Placement's candidates query, the most of
Placement's work for a request; Placement's claim still decides (a 409 sends it to
the next host). So the account need not be exact, only close and soon current:

- inventory and traits: what `registration.py` set in Placement;
- used: the claims of the instances whose specs this host holds (each spec's
  `resources`, what the claim check judges here alone), from the watch and every
  reconcile;
- as_of: the etcd revision up to which the host had seen its specs (a scheduler
  adds its own claims written after it: `hostview.OwnClaims`).

An instance that ended in ERROR keeps its spec (and so its place in `used`) until it
is destroyed, though its claim was freed: the account errs on the side of full, and
a scheduler that finds no room in the accounts asks Placement.

Changes are published once per burst of events: the first marks the host and posts
one flush to the main loop, which runs after the events queued before it. A flush
writes every marked host's stats in as few transactions as etcd allows, each put
compared with the stats' revision we last saw, so build failures written meanwhile
(`hosts.record_build_failure`, an operator's `update_resource_stats`) are read again
and kept, never erased.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import Any

from etcd_compute.errors import InvalidMessage
from etcd_compute.etcd import KeyValueStore, Range, Txn
from etcd_compute.hosts import decode_stats, stats_put
from etcd_compute.instances import records

LOG = logging.getLogger("etcd_compute.compute")

# Puts per transaction (etcd's default --max-txn-ops is 128; a compare and a put each).
CHUNK = 64

Post = Callable[[Callable[..., None], tuple[Any, ...]], None]


class CapacityAccount:
    def __init__(self, store: KeyValueStore, hosts: list[str],
                 inventories: Callable[[], dict[str, dict[str, Any]]],
                 traits: Callable[[], set[str]], post: Post):
        self.store = store
        self.hosts = list(hosts)
        self.inventories, self.traits, self.post = inventories, traits, post
        # What each instance's spec claims on its host: {rp: {uuid: {rc: amount}}}.
        self.held: dict[str, dict[str, dict[str, int]]] = {rp: {} for rp in self.hosts}
        self.as_of = 0
        self._dirty: set[str] = set()
        self._posted = False
        # Our last view of each host's stats: (message, mod_revision); absent: not read yet.
        self._stats: dict[str, tuple[dict[str, Any] | None, int]] = {}

    # --- what changed ------------------------------------------------------------------------

    def spec(self, rp: str, uuid: str, raw: bytes | None, revision: int) -> None:
        """A spec of ours was written (`raw`) or deleted (None) at `revision`."""
        held = self.held.get(rp)
        if held is None:
            return
        resources = _resources_here(rp, uuid, raw) if raw is not None else None
        if resources is None:
            changed = held.pop(uuid, None) is not None
        else:
            changed = held.get(uuid) != resources
            held[uuid] = resources
        self.seen(revision)
        if changed:
            self.mark(rp)

    def reset(self, specs: dict[str, dict[str, bytes]], revision: int) -> None:
        """Every spec of ours as a reconcile read them ({rp: {uuid: raw}}) at `revision`."""
        for rp in self.hosts:
            self.held[rp] = {uuid: resources for uuid, raw in specs.get(rp, {}).items()
                             if (resources := _resources_here(rp, uuid, raw)) is not None}
        self.seen(revision)
        self.mark(*self.hosts)

    def seen(self, revision: int) -> None:
        self.as_of = max(self.as_of, revision)

    def mark(self, *hosts: str) -> None:
        """These hosts' accounts changed (inventory or traits too): publish them soon."""
        self._dirty.update(hosts)
        if self._dirty and not self._posted:
            self._posted = True
            self.post(self.flush, ())

    # --- publishing --------------------------------------------------------------------------

    def account(self, rp: str) -> dict[str, Any] | None:
        """The host's capacity message, or None before it registered an inventory."""
        inventory = self.inventories().get(rp)
        if not inventory:
            return None
        used: dict[str, int] = {}
        for resources in self.held[rp].values():
            for rc, amount in resources.items():
                used[rc] = used.get(rc, 0) + amount
        return {"inventory": inventory, "used": used, "instances": len(self.held[rp]),
                "traits": sorted(self.traits()), "as_of": self.as_of}

    def flush(self) -> None:
        """Publish every marked host (the main loop runs this once per burst)."""
        self._posted = False
        dirty, self._dirty = sorted(self._dirty), set()
        try:
            self._read([rp for rp in dirty if rp not in self._stats])
            for start in range(0, len(dirty), CHUNK):
                self._publish(dirty[start:start + CHUNK])
        except BaseException:
            # etcd unreachable (the main loop tries the flush again in a second), or worse:
            # nothing marked is forgotten.
            self._dirty.update(dirty)
            raise

    def _publish(self, hosts: list[str]) -> None:
        updates = {rp: message for rp in hosts if (message := self._message(rp)) is not None}
        if not updates:
            return
        txn = Txn()
        for rp, message in updates.items():
            txn = txn + stats_put(self.store, rp, message, self._stats[rp][1])
        written = self.store.commit(txn)
        if written is not None:
            for rp, message in updates.items():
                self._stats[rp] = (message, written)
            return
        # Someone wrote stats meanwhile (a build failure): read those again, one at a time.
        self._read(list(updates))
        for rp in updates:
            message = self._message(rp)
            if message is None:
                continue
            written = self.store.commit(stats_put(self.store, rp, message, self._stats[rp][1]))
            if written is None:
                self._stats.pop(rp, None)  # written meanwhile again: the next flush reads it
                self.mark(rp)
            else:
                self._stats[rp] = (message, written)

    def _message(self, rp: str) -> dict[str, Any] | None:
        """The stats to write for `rp`: what is there (build failures) with our account."""
        capacity = self.account(rp)
        if capacity is None:
            return None
        current = self._stats[rp][0] or {}
        return {**current, "capacity": capacity, "updated_at": time.time()}

    def _read(self, hosts: list[str]) -> None:
        """The stats there are now (one round trip per CHUNK hosts). Unreadable ones are
        replaced by ours (their build failures lost with them)."""
        for start in range(0, len(hosts), CHUNK):
            chunk = hosts[start:start + CHUNK]
            results, _ = self.store.read_many([Range(self.store.keys.stats(rp), prefix=False)
                                               for rp in chunk])
            for rp, result in zip(chunk, results, strict=True):
                entry = result.entries[0] if result.entries else None
                self._stats[rp] = (decode_stats(entry.value), entry.mod_revision) if entry \
                    else (None, 0)


def _resources_here(rp: str, uuid: str, raw: bytes) -> dict[str, int] | None:
    """What a spec claims on `rp`: its resources, what the claim check judges on its host
    before a guest is defined (not `allocations`, which a spec need not carry); None for a
    spec the host refuses (unreadable, or not for its key): it holds nothing, its claim is
    freed."""
    try:
        return dict(records.spec_at(rp, uuid, raw)["resources"])
    except InvalidMessage:
        return None

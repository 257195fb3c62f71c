"""The scheduler service's view of the hosts, kept current from etcd watches.

What a direct `schedule.py` reads from etcd on every request (heartbeats,
stats, instance counts: `hoststate.Cluster`), the service keeps here: one
snapshot when it starts leading, then every event of the watches on
/alive/, /stats/ and /hosts/. Messages are validated once, when they
change. Free capacity is not cached: it comes from Placement with each
batch's candidates, and Placement's atomic claim has the last word.

Events at or before the snapshot's revision are skipped (the snapshot has
them); later ones are applied in order, so the cache converges to etcd's
state whatever the watch replays.
"""

from __future__ import annotations

import threading
from collections import Counter, defaultdict

from etcd_compute.etcd import KeyValueStore, Range
from etcd_compute.hosts import decode_heartbeat, decode_stats, heartbeat_and_stats_ranges, host_of
from etcd_compute.keys import SPECS, Keys
from etcd_compute.scheduler.hoststate import Cluster


class HostCache:
    def __init__(self, keys: Keys):
        self.keys = keys
        self._lock = threading.Lock()
        self._alive: dict[str, str] = {}  # rp -> name
        self._failures: dict[str, list[float]] = {}  # rp -> build failure times
        self._specs: defaultdict[str, set[str]] = defaultdict(set)  # rp -> instance uuids
        self.revision = 0
        self.loaded = False

    def load(self, store: KeyValueStore) -> int:
        """Start from etcd's state (one read); the revision to watch from, less one."""
        (alive, stats, hosts), revision = store.read_many([
            *heartbeat_and_stats_ranges(self.keys), Range(self.keys.hosts(), keys_only=True)])
        with self._lock:
            self._alive, self._failures, self._specs = {}, {}, defaultdict(set)
            for entry in alive.entries:
                self._put_alive(entry.key, entry.value)
            for entry in stats.entries:
                self._put_stats(entry.key, entry.value)
            for entry in hosts.entries:
                self._put_host_key(entry.key, present=True)
            self.revision = revision
            self.loaded = True
        return revision

    def apply(self, key: str, value: bytes | None, revision: int) -> None:
        """One watch event: `value` None for a delete; `revision` the event's."""
        with self._lock:
            if revision <= self.revision and self.loaded:
                return
            if key.startswith(self.keys.alive_prefix()):
                if value is None:
                    self._alive.pop(host_of(key), None)
                else:
                    self._put_alive(key, value)
            elif key.startswith(self.keys.stats_prefix()):
                if value is None:
                    self._failures.pop(host_of(key), None)
                else:
                    self._put_stats(key, value)
            elif key.startswith(self.keys.hosts()):
                self._put_host_key(key, present=value is not None)

    def _put_alive(self, key: str, value: bytes) -> None:
        rp, message = host_of(key), decode_heartbeat(value)
        if message is None:
            self._alive.pop(rp, None)  # an unreadable heartbeat counts as none
            return
        self._alive[rp] = message.get("name", rp)

    def _put_stats(self, key: str, value: bytes) -> None:
        rp, message = host_of(key), decode_stats(value)
        if message is None:
            self._failures.pop(rp, None)
            return
        self._failures[rp] = list(message.get("build_failures", []))

    def _put_host_key(self, key: str, present: bool) -> None:
        parsed = self.keys.parse_host_key(key)
        if parsed is None or parsed.kind != SPECS:
            return
        if present:
            self._specs[parsed.host].add(parsed.uuid)
        else:
            specs = self._specs.get(parsed.host)
            if specs is not None:
                specs.discard(parsed.uuid)
                if not specs:
                    del self._specs[parsed.host]

    def cluster(self) -> Cluster:
        """What the planner needs, as of the last event seen (copies: safe to plan on)."""
        with self._lock:
            return Cluster(dict(self._alive),
                           {rp: list(times) for rp, times in self._failures.items()},
                           Counter({rp: len(uuids) for rp, uuids in self._specs.items()}))

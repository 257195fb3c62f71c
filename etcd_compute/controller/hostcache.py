"""The scheduler service's view of the hosts, kept current from etcd watches.

What a direct `schedule.py` reads from etcd on every request (heartbeats,
stats, instance counts: `hoststate.Cluster`; the hosts' accounts of their
capacity and the operators' disables: `hostview.HostView`), the service keeps
here: one snapshot when it starts leading, then every event of the watches on
/alive/, /stats/, /maintenance/ and /hosts/. Messages are validated once,
when they change. Placement's atomic claim has the last word on capacity.

Events at or before the snapshot's revision are skipped (the snapshot has
them); later ones are applied in order, so the cache converges to etcd's
state whatever the watch replays.
"""

from __future__ import annotations

import threading
from collections import Counter, defaultdict
from typing import Any

from etcd_compute.etcd import KeyValueStore, Range
from etcd_compute.hosts import capacity_of, decode_heartbeat, decode_stats, host_of, view_ranges
from etcd_compute.keys import SPECS, Keys
from etcd_compute.scheduler.hoststate import Cluster
from etcd_compute.scheduler.hostview import HostView


class HostCache:
    def __init__(self, keys: Keys):
        self.keys = keys
        self._lock = threading.Lock()
        self._alive: dict[str, str] = {}  # rp -> name
        self._failures: dict[str, list[float]] = {}  # rp -> build failure times
        self._accounts: dict[str, dict[str, Any]] = {}  # rp -> its account of its capacity
        self._disabled: set[str] = set()  # rp disabled by an operator
        self._specs: defaultdict[str, set[str]] = defaultdict(set)  # rp -> instance uuids
        self.revision = 0
        self.loaded = False

    def load(self, store: KeyValueStore) -> int:
        """Start from etcd's state (one read); the revision to watch from, less one."""
        (alive, stats, disabled, hosts), revision = store.read_many([
            *view_ranges(self.keys), Range(self.keys.hosts(), keys_only=True)])
        with self._lock:
            self._alive, self._failures, self._specs = {}, {}, defaultdict(set)
            self._accounts, self._disabled = {}, {host_of(e.key) for e in disabled.entries}
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
                    self._accounts.pop(host_of(key), None)
                else:
                    self._put_stats(key, value)
            elif key.startswith(self.keys.maintenance_prefix()):
                if value is None:
                    self._disabled.discard(host_of(key))
                else:
                    self._disabled.add(host_of(key))
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
            self._accounts.pop(rp, None)
            return
        self._failures[rp] = list(message.get("build_failures", []))
        account = capacity_of(message)
        if account is None:
            self._accounts.pop(rp, None)
        else:
            self._accounts[rp] = account

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

    def view(self) -> HostView:
        """The live hosts' accounts as of the last event seen (safe to plan on: the accounts
        are replaced, never changed, when a host publishes again)."""
        with self._lock:
            live = set(self._alive)
            accounts = {rp: a for rp, a in self._accounts.items() if rp in live}
            cluster = Cluster(dict(self._alive),
                              {rp: list(times) for rp, times in self._failures.items()})
            return HostView(accounts, live - set(accounts), cluster, set(self._disabled),
                            self.revision)

"""Leader election through etcd: exactly one `schedule.py serve` acts; standbys wait.

The leader key `/controller/leader` is created only if absent, bound to the
candidate's lease. The leader refreshes its lease every third of the TTL; if
it dies, the key vanishes with the lease and a standby's next attempt
(every second) wins. A leader that cannot refresh in time stops acting
before its lease can run out (`is_leader` turns false at the deadline it
could still vouch for), so two controllers never act at once.
"""

from __future__ import annotations

import logging
import os
import socket
import threading
from typing import Any

from etcd_compute import messages
from etcd_compute.clock import SYSTEM, Clock
from etcd_compute.errors import EtcdComputeError
from etcd_compute.etcd import Compare, Store, Txn, absent, put_message

LOG = logging.getLogger("etcd_compute.controller")


class Election:
    def __init__(self, store: Store, ttl: int = 10, name: str | None = None,
                 clock: Clock = SYSTEM):
        self.store = store
        self.clock = clock
        self.ttl = ttl
        self.name = name or f"{socket.gethostname()}:{os.getpid()}"
        self.lease: Any = None
        # The revision our leader key was created at: what the fence compares.
        self.revision = 0
        # Monotonic time until which our lease is certainly alive (last refresh + TTL,
        # minus a margin): past it we no longer count as leader.
        self._valid_until = 0.0
        self._lock = threading.Lock()

    @property
    def is_leader(self) -> bool:
        with self._lock:
            return self.lease is not None and self.clock.now() < self._valid_until

    def _vouch(self, sent_at: float, ttl: int) -> None:
        with self._lock:
            self._valid_until = sent_at + max(ttl - 1, 1) * 0.9

    def campaign(self) -> bool:
        """Try once to become leader; True if we are now."""
        if self.is_leader:
            return True
        sent = self.clock.now()
        lease = self.store.lease(self.ttl)
        key = self.store.keys.leader()
        won = self.store.commit(Txn([absent(key)], [put_message(
            messages.CONTROLLER_LEADER, key,
            {"name": self.name, "since": self.clock.wall(), "pid": os.getpid()}, int(lease.id))]))
        if won is None:
            lease.revoke()
            return False
        with self._lock:
            self.lease, self.revision = lease, won
        self._vouch(sent, self.ttl)
        LOG.info("leader now (%s)", self.name)
        return True

    def fence(self) -> Compare:
        """A compare that holds only while the leader key is the one we created: a
        transaction carrying it cannot be applied by a leader that lost its lease, even
        one that does not know it yet (paused, cut off)."""
        return Compare(self.store.keys.leader(), "create", "==", self.revision)

    def refresh(self) -> bool:
        """Keep the lease; False (no longer leader, for now) if etcd cannot be reached past
        what we can vouch for. A lease etcd forgot is lost for good (`lease` is None then).
        A try may take etcd.timeout: a slow path to etcd must not cost the lead (a member
        without a leader holds the keep-alive and answers it once there is one again)."""
        lease = self.lease
        if lease is None:
            return False
        sent = self.clock.now()
        timeout = getattr(self.store, "config", {}).get("timeout", 5.0)
        try:
            ttl = self.store.keep_alive(lease.id, timeout)
        except (EtcdComputeError, Exception) as exc:  # noqa: BLE001
            LOG.warning("leader lease not refreshed (%s)", exc.__class__.__name__)
            return self.is_leader
        if ttl <= 0:
            self._lost("leader lease expired")
            return False
        self._vouch(sent, ttl)
        return True

    def _lost(self, why: str) -> None:
        with self._lock:
            if self.lease is not None:
                LOG.warning("no longer leader: %s", why)
            self.lease = None
            self._valid_until = 0.0

    def resign(self) -> None:
        """Give leadership up now (the standby takes over at once, not after the TTL)."""
        lease, self.lease = self.lease, None
        self._lost("resigned")
        if lease is not None:
            try:
                lease.revoke()
            except Exception:  # noqa: BLE001 (best effort: it expires anyway)
                LOG.debug("leader lease revoke failed")

    def leader(self) -> dict[str, Any] | None:
        """Who leads now (any controller may ask)."""
        message, _ = self.store.read(messages.CONTROLLER_LEADER, self.store.keys.leader())
        return message

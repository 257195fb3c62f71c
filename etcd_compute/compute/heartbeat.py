"""The heartbeat: an etcd lease that holds our /alive/<rp> keys while we run.

A thread refreshes the lease every third of its TTL. If etcd forgot it (we
were cut off longer than the TTL), a new lease and new keys are taken. When
the daemon stops, the lease is revoked and the keys vanish at once; when it
dies, they vanish after the TTL and the scheduler stops choosing the host.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from typing import Any

from etcd_compute import messages
from etcd_compute.compute.identity import HostIdentity
from etcd_compute.errors import ServiceUnavailable
from etcd_compute.etcd import ETCD_DOWN, Store

LOG = logging.getLogger("etcd_compute.compute")

RETRY_SECONDS = 0.2


class Heartbeat:
    def __init__(self, store: Store, hosts: dict[str, HostIdentity], ttl: int,
                 driver_name: str, stopping: threading.Event):
        self.store = store
        self.hosts = hosts
        self.ttl = ttl
        self.driver_name = driver_name
        self.stopping = stopping
        self.lease: Any = None
        self.lock = threading.Lock()

    def start(self) -> None:
        self._new_lease()
        threading.Thread(target=self._loop, name="heartbeat", daemon=True).start()

    def _new_lease(self) -> None:
        with self.lock:
            self.lease = self.store.lease(self.ttl)
            now = time.time()
            for host in self.hosts.values():
                self.store.put(
                    messages.ALIVE, self.store.keys.alive(host.uuid),
                    {"host": host.uuid, "name": host.name, "since": now,
                     "driver": self.driver_name},
                    lease=self.lease,
                )

    def _loop(self) -> None:
        interval = max(self.ttl / 3, 0.5)
        # A try must end well within the TTL, whatever etcd.timeout is: a member that went
        # silent costs this much, then the next member is asked.
        timeout = min(self.store.config.get("timeout", 5.0), interval)
        failing_since: float | None = None
        wait = interval
        while not self.stopping.wait(wait):
            wait = interval
            try:
                with self.lock:
                    ttl_left = self.store.keep_alive(self.lease.id, timeout)
                if ttl_left <= 0:
                    LOG.warning("heartbeat lease expired; taking a new one")
                    self._new_lease()
                else:
                    # Each refresh, so a test (or an operator at DEBUG) sees when it resumed.
                    LOG.debug("heartbeat: lease %x refreshed", self.lease.id)
                if failing_since is not None:
                    LOG.info("heartbeat: etcd answers again after %.1f s",
                             time.monotonic() - failing_since)
                    failing_since = None
            except ETCD_DOWN + (ServiceUnavailable,):
                # The client has moved on to another member: try it soon, not a third of
                # a TTL later (the TTL may be nearly spent by now).
                wait = RETRY_SECONDS
                if failing_since is None:  # once per outage, not five times a second
                    failing_since = time.monotonic()
                    LOG.warning("heartbeat: etcd unreachable; retrying")
            except Exception:
                LOG.exception("heartbeat failed")

    def revoke(self) -> None:
        """Drop the lease: our /alive/ keys vanish now, not after the TTL."""
        with contextlib.suppress(Exception), self.lock:
            if self.lease is not None:
                self.lease.revoke()

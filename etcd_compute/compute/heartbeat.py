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
        failing_since: float | None = None
        while not self.stopping.wait(interval):
            try:
                with self.lock:
                    response = list(self.lease.refresh())[0]
                if response.TTL <= 0:
                    LOG.warning("heartbeat lease expired; taking a new one")
                    self._new_lease()
                else:
                    # Each refresh, so a test (or an operator at DEBUG) sees when it resumed.
                    LOG.debug("heartbeat: lease %x refreshed", self.lease.id)
                if failing_since is not None:
                    LOG.info("heartbeat: etcd answers again after %.1f s",
                             time.monotonic() - failing_since)
                    failing_since = None
            except ETCD_DOWN + (ServiceUnavailable, IndexError):
                failing_since = failing_since or time.monotonic()
                LOG.warning("heartbeat: etcd unreachable; retrying")
            except Exception:
                LOG.exception("heartbeat failed")

    def revoke(self) -> None:
        """Drop the lease: our /alive/ keys vanish now, not after the TTL."""
        with contextlib.suppress(Exception), self.lock:
            if self.lease is not None:
                self.lease.revoke()

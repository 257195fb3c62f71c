"""Self-fencing: every guest here powered off when our lease may be lost, and back after.

The heartbeat (see heartbeat.py) calls `Fencer.fence` from its watchdog
thread when no lease renewal has succeeded for heartbeat_ttl -
fence_margin_seconds: from then on the controller may, once the lease has
expired and its grace period passed, rebuild our instances elsewhere. So:
close the gate (no job may start), stop the worker pool (builds in flight
die with their workers), power off every guest of ours. `lift` reopens the
gate once a renewal succeeds; the daemon then reconciles: guests whose
instance is still ours are powered on again, the others (moved or deleted
while we were away) are destroyed here, without touching their claims.
"""

from __future__ import annotations

import logging
import threading
from typing import Any

from etcd_compute.compute.pool import WorkerPool
from etcd_compute.drivers import Driver, load_driver

LOG = logging.getLogger("etcd_compute.compute")


class Gate:
    """Whether jobs may start now: closed while the host is fenced."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.closed = False


class Fencer:
    def __init__(self, config: dict[str, Any], pool: WorkerPool, gate: Gate):
        self.config = config
        self.pool = pool
        self.gate = gate
        # A driver of the main process's own: fencing must not wait for a worker.
        self._driver: Driver | None = None

    def fence(self) -> list[str]:
        with self.gate.lock:
            self.gate.closed = True
            self.pool.stop(join_timeout=0)  # a build in flight must not start a guest
        if self._driver is None:
            self._driver = load_driver(self.config)
        stopped = self._driver.fence()
        LOG.error("fenced: powered off %d guest(s)%s", len(stopped),
                  f" ({', '.join(stopped)})" if stopped else "")
        return stopped

    def lift(self) -> None:
        with self.gate.lock:
            if not self.gate.closed:
                return
            self.pool.start()
            self.gate.closed = False
        LOG.warning("fence lifted: reconciling")

"""The heartbeat: an etcd lease that holds our /alive/<rp> keys while we run, and fencing.

A thread refreshes the lease on the timing `heartbeat_timing.heartbeat_timing` derives
from the TTL, the fence margin and how long an etcd leader election may take
(every third of the TTL, or sooner, so that two tries still fit between a
renewal's due time and the fence point across an election), and tries a
failed renewal again at once on the next member. If etcd forgot the lease (we
were cut off longer than the TTL), a new lease and new keys are taken. When
the daemon stops, the lease is revoked and the keys vanish at once; when it
dies, they vanish after the TTL and the scheduler stops choosing the host.

Self-fencing: etcd counts a lease's TTL from the last renewal it received,
which was sent no earlier than our last successful refresh. So once no
refresh has succeeded for `heartbeat_ttl - fence_margin_seconds` (measured
from when that refresh was sent), our lease may expire within the margin and
the controller may then, after its grace period, rebuild our instances on
another host: `on_fence` powers every guest here off first. When a refresh
(or a new lease) succeeds again, `on_unfence` lets the daemon reconcile.
"""

from __future__ import annotations

import contextlib
import logging
import threading
from collections.abc import Callable
from typing import Any

from etcd_compute import metrics
from etcd_compute.clock import SYSTEM, Clock
from etcd_compute.compute.identity import HostIdentity
from etcd_compute.errors import ServiceUnavailable
from etcd_compute.etcd import ETCD_DOWN, Store
from etcd_compute.heartbeat_timing import HeartbeatTiming, heartbeat_timing
from etcd_compute.hosts import beat

LOG = logging.getLogger("etcd_compute.compute")
# How often the watchdog looks whether the fence point has passed.
WATCHDOG_SECONDS = 0.1


class Heartbeat:
    def __init__(self, store: Store, hosts: dict[str, HostIdentity], ttl: int,
                 driver_name: str, stopping: threading.Event, fence_margin: float = 3.0,
                 on_fence: Callable[[], None] | None = None,
                 on_unfence: Callable[[], None] | None = None,
                 timing: HeartbeatTiming | None = None, clock: Clock = SYSTEM):
        self.store = store
        self.clock = clock
        self.hosts = hosts
        self.ttl = ttl
        self.driver_name = driver_name
        self.stopping = stopping
        self.timing = timing or heartbeat_timing(
            {"heartbeat_ttl": ttl, "fence_margin_seconds": fence_margin}, store.config)
        self.fence_after = self.timing.fence_after
        self.on_fence = on_fence
        self.on_unfence = on_unfence
        self.lease: Any = None
        self.lock = threading.Lock()
        # Monotonic time the last successful renewal (or grant) was sent.
        self.last_ok = self.clock.now()
        self.fenced = False
        self.lock_fence = threading.Lock()
        # Monotonic time etcd stopped answering (None while it answers).
        self.failing_since: float | None = None

    def start(self) -> None:
        self._new_lease()
        threading.Thread(target=self._loop, name="heartbeat", daemon=True).start()
        # Its own thread: a refresh blocked on an unreachable etcd (up to etcd.timeout)
        # must not delay the fence.
        threading.Thread(target=self._watchdog, name="fence-watchdog", daemon=True).start()

    def _new_lease(self) -> None:
        sent = self.clock.now()
        with self.lock:
            self.lease = self.store.lease(self.ttl)
            for host in self.hosts.values():
                beat(self.store, self.lease, host.uuid, host.name, self.driver_name)
        self._renewed(sent)

    def _renewed(self, sent: float) -> None:
        with self.lock_fence:
            self.last_ok = sent
            if not self.fenced:
                return
            self.fenced = False
        LOG.warning("heartbeat back: lifting the fence")
        if self.on_unfence:
            self.on_unfence()

    def _loop(self) -> None:
        timing = self.timing
        wait = timing.interval
        while not self.clock.wait(self.stopping, wait):
            # After a failure the client has moved on to another member: try it soon, not
            # an interval later (the TTL may be nearly spent by now).
            wait = timing.interval if self._refresh(timing.try_timeout) else timing.retry

    def _watchdog(self) -> None:
        while not self.clock.wait(self.stopping, WATCHDOG_SECONDS):
            if not self.fenced and self.clock.now() - self.last_ok >= self.fence_after:
                self._fence()

    def _refresh(self, timeout: float) -> bool:
        """One renewal; False when etcd did not answer."""
        sent = self.clock.now()
        try:
            with self.lock:
                ttl_left = self.store.keep_alive(self.lease.id, timeout)
            if ttl_left > 0:
                # Each refresh, so a test (or an operator at DEBUG) sees when it resumed.
                LOG.debug("heartbeat: lease %x refreshed", self.lease.id)
                self._answered()
                self._renewed(sent)
                return True
            LOG.warning("heartbeat lease expired; taking a new one")
            self._answered()
            if not self.fenced:
                self._fence()  # the controller may already be recovering our instances
            self._new_lease()
            return True
        except ETCD_DOWN + (ServiceUnavailable, IndexError) as exc:
            metrics.retried("heartbeat", exc)
            if self.failing_since is None:  # once per outage, not five times a second
                self.failing_since = self.clock.now()
                LOG.warning("heartbeat: etcd unreachable; retrying (%.1f s since the last "
                            "renewal, fencing at %.1f s)", self.clock.now() - self.last_ok,
                            self.fence_after)
            return False
        except Exception:
            LOG.exception("heartbeat failed")
            return True

    def _answered(self) -> None:
        if self.failing_since is not None:
            LOG.info("heartbeat: etcd answers again after %.1f s",
                     self.clock.now() - self.failing_since)
            self.failing_since = None

    def _fence(self) -> None:
        with self.lock_fence:
            if self.fenced:
                return
            self.fenced = True
            LOG.error("no heartbeat renewal for %.1f s: fencing (powering off every guest "
                      "here)", self.clock.now() - self.last_ok)
            if self.on_fence:
                self.on_fence()

    def revoke(self) -> None:
        """Drop the lease: our /alive/ keys vanish now, not after the TTL."""
        with contextlib.suppress(Exception), self.lock:
            if self.lease is not None:
                self.lease.revoke()

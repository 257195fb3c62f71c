"""The scheduler service's loop: while this controller leads, drain the queue in passes.

Started by `serve.py` when it becomes leader, stopped when it stops leading.
It opens the queue (/queue/open, bound to the leader's lease: clients send
requests only while it exists), then loops: wait for a request event (or a
second), read everything pending, hand it to the `Batcher`. Requests that
arrive during a pass make the next pass: the busier the queue, the bigger
the batches. Nothing a request holds can stop the loop: every pass ends in
answers, a retry later, or a logged error and the next pass.
"""

from __future__ import annotations

import logging
import threading
import time
from typing import Any

from etcd_compute import messages
from etcd_compute.errors import ServiceUnavailable
from etcd_compute.etcd import KeyValueStore, Txn, put_message
from etcd_compute.placement import PlacementClient
from etcd_compute.scheduler import metrics as scheduler_metrics
from etcd_compute.scheduler.batcher import Batcher, LostLeadership
from etcd_compute.scheduler.election import Election
from etcd_compute.scheduler.hostcache import HostCache
from etcd_compute.scheduler.queue import read_pending
from etcd_compute.scheduler.scheduler import Scheduler

LOG = logging.getLogger("etcd_compute.controller")

# How long an idle loop waits for a request event before looking anyway.
IDLE_SECONDS = 1.0


class AnswerLease:
    """One lease for many answers: renewed every `ttl / 4`, so each answer lives at least
    3/4 of `ttl` (one lease grant per batch would be one more round trip)."""

    def __init__(self, store: KeyValueStore, ttl: int):
        self.store, self.ttl = store, ttl
        self._lease: int | None = None
        self._granted = 0.0

    def __call__(self) -> int:
        if self._lease is None or time.monotonic() - self._granted > self.ttl / 4:
            self._lease = self.store.grant(self.ttl)
            self._granted = time.monotonic()
        return self._lease


class QueueService:
    def __init__(self, store: KeyValueStore, placement: PlacementClient, scheduler: Scheduler,
                 election: Election, cache: HostCache, settings: dict[str, Any]):
        self.store, self.keys = store, store.keys
        self.election = election
        self.batcher = Batcher(store, placement, scheduler, cache, election.fence,
                               lambda: election.is_leader,
                               AnswerLease(store, settings["service_answer_ttl"]))
        self._wakeup = threading.Event()
        self._stopping = threading.Event()
        self._thread: threading.Thread | None = None

    def wake(self) -> None:
        """A request event arrived (the watch thread calls this)."""
        self._wakeup.set()

    def start(self) -> None:
        self._stopping.clear()
        self._thread = threading.Thread(target=self.run, name="scheduler-queue", daemon=True)
        self._thread.start()

    def stop(self, timeout: float = 30.0) -> None:
        self._stopping.set()
        self._wakeup.set()
        if self._thread is not None:
            self._thread.join(timeout)
            self._thread = None

    def open(self) -> None:
        """Tell clients we take requests: /queue/open, bound to the leader's lease."""
        lease = self.election.lease
        self.store.commit(Txn([self.election.fence()], [put_message(
            messages.QUEUE_OPEN, self.keys.queue_open(),
            {"name": self.election.name, "since": time.time(), "lease_ttl": self.election.ttl},
            int(lease.id))]))

    def run(self) -> None:
        first, busy = True, True
        while not self._stopping.is_set() and self.election.is_leader:
            if not busy:
                self._wakeup.wait(IDLE_SECONDS)
            self._wakeup.clear()
            try:
                if first:
                    self.open()
                busy = self.drain(first)
                first = False
            except LostLeadership as exc:
                LOG.warning("scheduler service stops: %s", exc)
                return
            except ServiceUnavailable as exc:
                scheduler_metrics.retried("queue", exc)
                LOG.warning("scheduler service: %s; trying again in 1 s", exc)
                busy = False
                self._stopping.wait(1.0)
            except Exception:  # noqa: BLE001 (one bad pass must not stop the service)
                LOG.exception("scheduler service: unexpected error; trying again in 1 s")
                busy = False
                self._stopping.wait(1.0)

    def drain(self, first: bool = False) -> bool:
        """One pass over everything pending; True if any request was due (then the next
        pass starts at once: more may have come meanwhile)."""
        entries, _ = self.store.get_prefix(self.keys.queue_requests())
        if not entries:
            return False
        started = time.monotonic()
        pending = read_pending(self.keys, entries, self.batcher.settings)
        if first:
            # A leader that died mid-batch may have claimed without writing (a request uuid
            # used twice is found out when its claim is refused).
            self.batcher.free_stale_claims(pending)
        before = self.batcher.stats.copy()
        due = self.batcher.run(pending)
        if not due:
            return False
        done = self.batcher.stats - before
        LOG.info("pass of %d request(s): %d answered, %d refused, %d to retry, %d claim "
                 "conflict(s), %.0f ms", due, done["answered"], done["refused"],
                 done["retried"], done["claim_conflicts"], 1000 * (time.monotonic() - started))
        scheduler_metrics.queue_pass(due, done)
        return True

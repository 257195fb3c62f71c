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
from etcd_compute.controller import metrics as controller_metrics
from etcd_compute.controller.batcher import Batcher, LostLeadership
from etcd_compute.controller.election import Election
from etcd_compute.controller.hostcache import HostCache
from etcd_compute.errors import ServiceUnavailable
from etcd_compute.etcd import KeyValueStore, Txn, put_message
from etcd_compute.placement import PlacementClient
from etcd_compute.scheduler.queue import read_pending
from etcd_compute.scheduler.scheduler import Scheduler

LOG = logging.getLogger("etcd_compute.controller")

# How long an idle loop waits for a request event before looking anyway.
IDLE_SECONDS = 1.0
# After a pass that answered several clients, how long to wait for them to ask again
# before the next pass (a pass started at once would hold only the stragglers, and the
# clients just answered would wait for it to end: batches of 2 and 6, not of 8).
GATHER_SECONDS = 0.05


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
        self._arrived = threading.Condition()
        self._arrivals = 0
        self._stopping = threading.Event()
        self._thread: threading.Thread | None = None

    def wake(self) -> None:
        """A request event arrived (the watch thread calls this)."""
        with self._arrived:
            self._arrivals += 1
            self._arrived.notify_all()
        self._wakeup.set()

    def _gather(self, answered: int) -> None:
        """Wait (briefly) until as many requests arrived as the last pass answered."""
        if answered < 2:
            return
        with self._arrived:
            start = self._arrivals
            self._arrived.wait_for(lambda: self._arrivals - start >= answered
                                   or self._stopping.is_set(), GATHER_SECONDS)

    def start(self) -> None:
        self._stopping.clear()
        self._thread = threading.Thread(target=self.run, name="scheduler-queue", daemon=True)
        self._thread.start()

    def stop(self, timeout: float = 30.0) -> None:
        self._stopping.set()
        self._wakeup.set()
        with self._arrived:
            self._arrived.notify_all()
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
        first, answered = True, 1
        while not self._stopping.is_set() and self.election.is_leader:
            if answered:
                self._gather(answered)
            else:
                self._wakeup.wait(IDLE_SECONDS)
            self._wakeup.clear()
            try:
                if first:
                    self.open()
                answered = self.drain(first)
                first = False
            except LostLeadership as exc:
                # Our lease may live on while the key is gone (deleted by hand, say): give
                # the lease up too, so that the controller campaigns again, afresh.
                LOG.warning("scheduler service stops: %s; resigning", exc)
                self.election.resign()
                return
            except ServiceUnavailable as exc:
                controller_metrics.retried("queue", exc)
                LOG.warning("scheduler service: %s; trying again in 1 s", exc)
                answered = 0
                self._stopping.wait(1.0)
            except Exception:  # noqa: BLE001 (one bad pass must not stop the service)
                LOG.exception("scheduler service: unexpected error; trying again in 1 s")
                answered = 0
                self._stopping.wait(1.0)

    def drain(self, first: bool = False) -> int:
        """One pass over everything pending: how many requests were due (0: none; the next
        pass waits for a request event). After a pass the next starts at once (more may
        have come meanwhile), or when those just answered asked again (`_gather`)."""
        entries, _ = self.store.get_prefix(self.keys.queue_requests())
        if not entries:
            return 0
        started = time.monotonic()
        pending = read_pending(self.keys, entries, self.batcher.settings)
        if first:
            # A leader that died mid-batch may have claimed without writing (a request uuid
            # used twice is found out when its claim is refused).
            self.batcher.free_stale_claims(pending)
        before, spent = self.batcher.stats.copy(), self.batcher.seconds.copy()
        due = self.batcher.run(pending)
        if not due:
            return 0
        done = self.batcher.stats - before
        spent = self.batcher.seconds - spent
        LOG.info("pass of %d request(s): %d answered, %d refused, %d to retry, %d claim "
                 "conflict(s), %.0f ms (candidates %.0f, plan %.0f, claim %.0f, write %.0f)",
                 due, done["answered"], done["refused"], done["retried"],
                 done["claim_conflicts"], 1000 * (time.monotonic() - started),
                 *(1000 * spent[phase] for phase in ("candidates", "plan", "claim", "write")))
        controller_metrics.queue_pass(due, done)
        return due

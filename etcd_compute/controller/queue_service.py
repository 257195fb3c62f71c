"""The scheduler service's loop: while this controller leads, drain the queue in passes.

Started by `serve.py` when it begins to lead, stopped when the lead ends. It
serves while leadership is confirmed, and only then: it opens the queue
(/queue/open, bound to the leader's lease: clients send requests only while
it exists), then loops: wait for a request event (or a second), read
everything pending, hand it to the `Batcher`. When leadership becomes
unconfirmed (a late lease refresh: the process was frozen, etcd held an
election or lost its quorum) it closes the queue (deletes /queue/open) and
waits; when leadership is confirmed again it opens the queue and serves
again. Requests that arrive during a pass make the next pass: the busier the
queue, the bigger the batches. Nothing a request holds can stop the loop:
every pass ends in answers, a retry later, or a logged error and the next pass.
"""

from __future__ import annotations

import logging
import threading
from typing import Any

from etcd_compute import messages
from etcd_compute.clock import SYSTEM, Clock
from etcd_compute.controller import metrics as controller_metrics
from etcd_compute.controller.batcher import Batcher, LostLeadership
from etcd_compute.controller.election import Election
from etcd_compute.controller.hostcache import HostCache
from etcd_compute.errors import ServiceUnavailable
from etcd_compute.etcd import Delete, KeyValueStore, SharedLease, Txn, put_message
from etcd_compute.placement import PlacementClient
from etcd_compute.scheduler.queue import read_pending
from etcd_compute.scheduler.scheduler import Scheduler

LOG = logging.getLogger("etcd_compute.controller")

# How long an idle loop waits for a request event before looking anyway.
IDLE_SECONDS = 1.0
# While leadership is unconfirmed, how often the loop looks whether it is confirmed again.
PAUSED_SECONDS = 0.1
# After a pass that answered several clients, how long to wait for them to ask again
# before the next pass (a pass started at once would hold only the stragglers, and the
# clients just answered would wait for it to end: batches of 2 and 6, not of 8).
GATHER_SECONDS = 0.05


class QueueService:
    def __init__(self, store: KeyValueStore, placement: PlacementClient, scheduler: Scheduler,
                 election: Election, cache: HostCache, settings: dict[str, Any],
                 clock: Clock = SYSTEM):
        self.store, self.keys = store, store.keys
        self.clock = clock
        self.election = election
        self.batcher = Batcher(store, placement, scheduler, cache, election.fence,
                               lambda: election.is_leader,
                               SharedLease(store, settings["service_answer_ttl"], clock))
        self._wakeup = threading.Event()
        self._arrived = threading.Condition()
        self._arrivals = 0
        self._stopping = threading.Event()
        self._thread: threading.Thread | None = None
        # Serving now (the queue open); the first pass of a serving spell frees stale claims;
        # how many the last pass answered (0: wait for a request event); when it ended.
        self._serving, self._first, self._answered = False, True, 1
        self._last_pass_end = clock.now()

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

    def open(self) -> bool:
        """Tell clients we take requests: /queue/open, bound to the leader's lease. False if
        we do not lead (the fence: the leader key is not the one we created)."""
        lease = self.election.lease
        if lease is None:
            return False
        return self.store.commit(Txn([self.election.fence()], [put_message(
            messages.QUEUE_OPEN, self.keys.queue_open(),
            {"name": self.election.name, "since": self.clock.wall(),
             "lease_ttl": self.election.ttl},
            int(lease.id))])) is not None

    def close(self) -> None:
        """No loop serves now: /queue/open goes (if it is still ours: the fence), so that
        clients do not queue requests nobody takes. If etcd cannot be reached, the key goes
        with our lease, or stays because we lead on and serve again."""
        try:
            self.store.commit(Txn([self.election.fence()], [Delete(self.keys.queue_open())]))
        except ServiceUnavailable as exc:
            LOG.info("scheduler service: could not close the queue (%s)", exc)

    @property
    def serving(self) -> bool:
        return self._serving

    def run(self) -> None:
        self._serving = False
        try:
            while not self._stopping.is_set():
                if not self.election.is_leader:
                    self._pause()
                    continue
                if not self._serving:
                    self._resume()
                    continue
                self._serve_once()
        finally:
            if self._serving:
                self._serving = False
                self.close()
                LOG.info("scheduler service stopped; queue closed")

    def _pause(self) -> None:
        if self._serving:
            self._serving = False
            LOG.warning("scheduler service paused (leadership unconfirmed); queue closed")
            self.close()
        self.clock.wait(self._stopping, PAUSED_SECONDS)

    def _resume(self) -> None:
        """Open the queue and serve again (or for the first time in this lead)."""
        try:
            opened = self.open()
        except ServiceUnavailable as exc:
            controller_metrics.retried("queue", exc)
            LOG.warning("scheduler service: cannot open the queue (%s); trying again in 1 s",
                        exc)
            self.clock.wait(self._stopping, 1.0)
            return
        if not opened:
            self._lost(LostLeadership("the leader key is not ours"))
            return
        self._serving, self._first, self._answered = True, True, 1
        LOG.info("scheduler service serving (queue open)")

    def _lost(self, exc: Exception) -> None:
        # Our lease may live on while the key is gone (deleted by hand, say): give the
        # lease up too, so that the controller campaigns again, afresh.
        LOG.warning("scheduler service stops: %s; resigning", exc)
        self._serving = False
        self.election.resign()
        self._stopping.set()

    def _serve_once(self) -> None:
        """One pass (after waiting for requests, or for answered clients to ask again)."""
        if self._answered:
            self._gather(self._answered)
        else:
            self.clock.wait(self._wakeup, IDLE_SECONDS)
        self._wakeup.clear()
        if self._stopping.is_set() or not self.election.is_leader:
            return
        try:
            self._answered = self.drain(self._first)
            self._first = False
        except LostLeadership as exc:
            self._lost(exc)
        except ServiceUnavailable as exc:
            controller_metrics.retried("queue", exc)
            LOG.warning("scheduler service: %s; trying again in 1 s", exc)
            self._answered = 0
            self.clock.wait(self._stopping, 1.0)
        except Exception:  # noqa: BLE001 (one bad pass must not stop the service)
            LOG.exception("scheduler service: unexpected error; trying again in 1 s")
            self._answered = 0
            self.clock.wait(self._stopping, 1.0)

    def drain(self, first: bool = False) -> int:
        """One pass over everything pending: how many requests were due (0: none; the next
        pass waits for a request event). After a pass the next starts at once (more may
        have come meanwhile), or when those just answered asked again (`_gather`)."""
        started = self.clock.now()
        entries, _ = self.store.get_prefix(self.keys.queue_requests())
        if not entries:
            return 0
        pending = read_pending(self.keys, entries, self.batcher.settings)
        read = self.clock.now() - started
        if first:
            # A leader that died mid-batch may have claimed without writing (a request uuid
            # used twice is found out when its claim is refused).
            self.batcher.free_stale_claims(pending)
        offers = self.batcher.offers
        before, spent = self.batcher.stats.copy(), self.batcher.seconds.copy()
        shapes = offers.on_accounts, offers.on_candidates
        due = self.batcher.run(pending)
        if not due:
            return 0
        done = self.batcher.stats - before
        spent = self.batcher.seconds - spent
        took = self.clock.now() - started
        # Where the pass's time went: the queue read, the hosts (the accounts, or Placement's
        # candidates: asked, or a kept answer), planning, the claim, the etcd writes, the
        # rest (answers refused, retries); and how long the service waited before it.
        hosts, plan = spent["candidates"], spent["plan"] - spent["candidates"]
        rest = took - read - spent["plan"] - spent["claim"] - spent["write"]
        LOG.info("pass of %d request(s): %d answered, %d refused, %d to retry, %d claim "
                 "conflict(s), %.0f ms (read %.0f, hosts %.0f [%d on accounts, %d on "
                 "candidates], plan %.0f, claim %.0f, write %.0f, other %.0f) after %.0f ms "
                 "waiting", due, done["answered"], done["refused"], done["retried"],
                 done["claim_conflicts"], 1000 * took, 1000 * read, 1000 * hosts,
                 offers.on_accounts - shapes[0], offers.on_candidates - shapes[1],
                 1000 * plan, 1000 * spent["claim"], 1000 * spent["write"],
                 1000 * max(0.0, rest), 1000 * (started - self._last_pass_end))
        self._last_pass_end = self.clock.now()
        controller_metrics.queue_pass(due, done)
        return due

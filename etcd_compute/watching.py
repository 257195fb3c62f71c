"""One watch loop for everything that follows etcd: the compute, the controller, the console.

`PrefixWatch` follows a prefix from a revision, forever, until cancelled,
and hands every event to its owner (`on_event`, which only queues it: the
owner's own thread decides). What can break a watch, and what it does:

- the stream ends or etcd cannot be reached (a member restarts, a network
  blip, a leader change, a lost quorum): subscribe again from the revision
  after the last event seen, after a backoff that grows from `first_delay`
  to `max_delay` and starts over once the stream delivers again;
- etcd compacted its history past that revision (`RevisionCompactedError`),
  or the member's history is behind what we saw already (a progress
  notification older than our revision): the events in between are lost,
  so the owner reads its whole state again (`resync`, which returns the
  revision it read at) and the watch carries on after that revision;
- anything else (a bug): logged with its traceback and retried the same
  way; after `max_failures` such failures in a row the owner reads its
  state again too, so that no revision can hold the loop forever.

etcd's progress notifications (asked for on every subscription) move the
revision on while nothing under the prefix changes, so a quiet prefix's
watch does not fall behind a compaction in the first place.

The owner's `resync` usually runs on the owner's thread (its decisions are
single-threaded): `on_owner_thread` turns "post this to my queue and wait"
into the callable the watch needs, cancellable like the rest.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from typing import Any

import pyetcd.exceptions

from etcd_compute import metrics
from etcd_compute.errors import ServiceUnavailable
from etcd_compute.etcd import ETCD_DOWN

LOG = logging.getLogger("etcd_compute.watch")

# How often a failing watch says so in the log once it has (not at every retry).
LOG_EVERY_SECONDS = 30.0


class Cancelled(Exception):
    """The watch was cancelled while it waited for its owner."""


class HistoryLost(Exception):
    """The member's history no longer holds the revision we resume from."""


class PrefixWatch:
    """Follow `prefix` in `store` (its `client.watch_prefix_response`) from `start_revision`
    (0: `resync` first). `on_event(event)` gets every event, in order; `resync()` reads the
    owner's whole state again and returns the revision it read at. `sleep(seconds)` waits
    (True: cancelled meanwhile); `clock()` tells monotonic time (both for tests); `log`
    takes what the watch has to say (a Logger, or anything with its warning, info,
    exception and debug)."""

    def __init__(self, store: Any, prefix: str, *, on_event: Callable[[Any], None],
                 resync: Callable[[], int], start_revision: int = 0, name: str = "watch",
                 first_delay: float = 0.1, max_delay: float = 1.0, max_failures: int = 5,
                 sleep: Callable[[float], bool] | None = None,
                 clock: Callable[[], float] = time.monotonic,
                 log: Any = LOG):
        self.store, self.prefix, self.name = store, prefix, name
        self.on_event, self.resync = on_event, resync
        # The next revision the watch must deliver: everything before it was handed over.
        self.next_revision = start_revision
        self.first_delay, self.max_delay, self.max_failures = first_delay, max_delay, max_failures
        self.clock, self.log = clock, log
        self._cancelled = threading.Event()
        self.sleep = sleep or self._cancelled.wait
        self._cancel_stream: Callable[[], None] | None = None
        self._must_resync = start_revision <= 0
        self._lock = threading.Lock()
        self._failures = 0  # in a row, since the last subscription etcd confirmed
        self._bugs = 0  # unexpected errors in a row, since an event was last handed over
        self._failing_since: float | None = None
        # When a loss was last logged (at most one line per LOG_EVERY_SECONDS, however
        # often a flapping member breaks the stream), and whether this outage's was.
        self._logged_at = float("-inf")
        self._told = False
        self.resyncs = 0

    # --- life ---------------------------------------------------------------------------

    def start(self) -> threading.Thread:
        thread = threading.Thread(target=self.run, name=f"{self.name} {self.prefix}",
                                  daemon=True)
        thread.start()
        return thread

    @property
    def cancelled(self) -> bool:
        return self._cancelled.is_set()

    def cancel(self) -> None:
        """Stop: the stream is closed now, a wait ends at once, `run` returns."""
        self._cancelled.set()
        with self._lock:
            cancel, self._cancel_stream = self._cancel_stream, None
        if cancel is not None:
            try:
                cancel()
            except Exception:  # noqa: BLE001 (closing anyway)
                LOG.debug("cancelling the %s stream failed", self.name, exc_info=True)

    def run(self) -> None:
        self._must_resync = self.next_revision <= 0
        try:
            while not self.cancelled:
                self._step()
        except Cancelled:
            return

    def _step(self) -> None:
        """Read again if we must, then follow the stream until it ends or breaks."""
        try:
            if self._must_resync:
                self.next_revision = self.resync() + 1
                self.resyncs += 1
                self._must_resync, self._bugs = False, 0
                if self.cancelled:
                    return
            self._follow()
            # The stream ended with no error (the member closed it): subscribe again, not
            # in a tight loop if it keeps doing so.
            if not self.cancelled:
                self._failed(None, "the stream ended")
        except (Cancelled, pyetcd.exceptions.RevisionCompactedError, HistoryLost) as exc:
            if self.cancelled or isinstance(exc, Cancelled):
                raise Cancelled() from None
            self.log.warning("%s %s: %s; reading everything again", self.name,
                             self.prefix, self._history_lost(exc))
            self._must_resync = True
            return
        except ETCD_DOWN + (ServiceUnavailable,) as exc:
            if self.cancelled:
                raise Cancelled() from None
            metrics.retried("watch", exc)
            failure: BaseException = exc
        except Exception as exc:  # noqa: BLE001 (a watch must not die of a bug)
            if self.cancelled:
                raise Cancelled() from None
            self.log.exception("%s %s failed at revision %d", self.name, self.prefix,
                               self.next_revision)
            failure = exc
        else:
            return
        # Outside the handlers: a wait that ends in Cancelled carries no error context.
        if not isinstance(failure, ETCD_DOWN + (ServiceUnavailable,)):
            self._bugs += 1
            if self._bugs >= self.max_failures:
                self._must_resync, self._bugs = True, 0
        self._failed(failure, failure.__class__.__name__)

    # --- one subscription ----------------------------------------------------------------

    def _follow(self) -> None:
        """Subscribe from `next_revision` and hand over what it delivers until it ends."""
        subscribed_from = self.next_revision
        responses, cancel = self.store.client.watch_prefix_response(
            self.prefix, start_revision=subscribed_from, progress_notify=True)
        with self._lock:
            self._cancel_stream = cancel
        if self.cancelled:
            cancel()
            return
        self._subscribed()
        try:
            for response in responses:
                events = list(getattr(response, "events", []))
                if not events:
                    self._progress(getattr(response, "header", None))
                for event in events:
                    self.on_event(event)
                    self._bugs = 0
                    # After the owner took it: an event it failed on is delivered again.
                    self.next_revision = max(self.next_revision, event.mod_revision + 1)
                if self.cancelled:
                    return
        finally:
            with self._lock:
                if self._cancel_stream is cancel:
                    self._cancel_stream = None
            try:
                cancel()
            except Exception:  # noqa: BLE001 (the stream is gone anyway)
                pass

    def _progress(self, header: Any) -> None:
        """A progress notification: everything up to its revision was delivered."""
        revision = getattr(header, "revision", 0) or 0
        if revision <= 0:
            return
        if revision + 1 < self.next_revision:
            raise HistoryLost(f"the member is at revision {revision}, behind the "
                              f"{self.next_revision - 1} already seen")
        self.next_revision = revision + 1

    # --- failures ------------------------------------------------------------------------

    def _history_lost(self, exc: BaseException) -> str:
        if isinstance(exc, pyetcd.exceptions.RevisionCompactedError):
            return (f"etcd compacted its history up to revision {exc.compacted_revision}, "
                    f"past {self.next_revision} where this watch resumes")
        return str(exc)

    def _subscribed(self) -> None:
        """etcd confirmed the subscription: the backoff starts over."""
        if self._failing_since is not None and self._told:
            self.log.info("%s %s: following again from revision %d after %.1f s",
                          self.name, self.prefix, self.next_revision,
                          self.clock() - self._failing_since)
        self._failures, self._failing_since, self._told = 0, None, False

    def _failed(self, exc: BaseException | None, what: str) -> int:
        """Count a failure, say so now and then, back off (raises Cancelled if cancelled)."""
        self._failures += 1
        now = self.clock()
        if self._failing_since is None:
            self._failing_since = now
        if exc is not None and now - self._logged_at >= LOG_EVERY_SECONDS:
            self._logged_at, self._told = now, True
            self.log.warning("%s %s lost (%s); resubscribing from revision %d (%d tr%s, "
                             "%.1f s)", self.name, self.prefix, what, self.next_revision,
                             self._failures, "y" if self._failures == 1 else "ies",
                             now - self._failing_since)
        if self.sleep(self.delay(self._failures)):
            raise Cancelled()
        return self._failures

    def delay(self, failures: int) -> float:
        """The backoff after `failures` failures in a row: doubling, at most `max_delay`."""
        return min(self.max_delay, self.first_delay * 2 ** max(failures - 1, 0))


def on_owner_thread(post: Callable[[Callable[[], None]], None], work: Callable[[], int],
                    cancelled: Callable[[], bool], poll: float = 0.1) -> Callable[[], int]:
    """A `resync` that runs `work` on the owner's thread: `post(job)` queues `job` there;
    the watch thread waits for its result (Cancelled once `cancelled()`), and gets the
    owner's exception if `work` raised one."""

    def resync() -> int:
        done = threading.Event()
        outcome: dict[str, Any] = {}

        def job() -> None:
            try:
                outcome["revision"] = work()
            except BaseException as exc:  # handed to the watch thread, which decides
                outcome["error"] = exc
            finally:
                done.set()

        post(job)
        while not done.wait(poll):
            if cancelled():
                raise Cancelled()
        if "error" in outcome:
            raise outcome["error"]
        return int(outcome["revision"])

    return resync

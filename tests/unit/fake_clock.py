"""A clock that stands still until the test moves it (`etcd_compute.clock.Clock`'s double).

Code under test runs its real threads; where they would wait (`sleep`, `wait`, `get`),
they wait on this clock instead. `advance(seconds)` moves time from one wake-up to the
next: at each, the threads whose time has come wake, and the clock lets every thread
that waits on it run until it waits again (or ends) before it moves on. So a test reads
like a timeline, costs no real waiting, and the times it sees are exact:

    clock = FakeClock()
    heartbeat = Heartbeat(..., clock=clock)
    heartbeat.start()
    clock.waiters(2)              # the renewal loop and the watchdog wait on the clock
    clock.advance(3.0)            # three renewal intervals go by, each renewal at its time

A thread that, once woken, blocks on something else (a real timer, a lock the test
holds) makes `advance` fail after a few real seconds, naming it: that is a wait the
clock does not see.
"""

from __future__ import annotations

import heapq
import itertools
import math
import queue
import threading
import time
import weakref
from collections.abc import Callable
from typing import Any, TypeVar

from etcd_compute.clock import Clock

Item = TypeVar("Item")

# How often a waiting thread looks whether what it waits for happened (an Event set, an
# item queued: neither tells the clock). Real seconds.
POLL = 0.002
# How long a woken thread may take to wait on the clock again (real seconds).
SETTLE = 5.0
# How often a thread still waiting on a clock whose test ended looks (real seconds).
CLOSED_POLL = 0.5

# Every clock not yet closed (tests/unit/conftest.py closes them after each test).
_OPEN: weakref.WeakSet[FakeClock] = weakref.WeakSet()


def close_all() -> None:
    for clock in list(_OPEN):
        clock.close()


class FakeClock(Clock):
    def __init__(self, start: float = 1000.0, wall: float = 1_700_000_000.0) -> None:
        self._now = start
        self._wall_offset = wall - start
        self._cond = threading.Condition()
        # Threads waiting on the clock now: until when, and what would end the wait sooner.
        self._waiting: dict[threading.Thread, tuple[float, Callable[[], bool]]] = {}
        # Every thread that ever waited on this clock (advance lets each run till it waits).
        self._known: set[threading.Thread] = set()
        self._timers: list[tuple[float, int, Callable[..., Any], tuple[Any, ...]]] = []
        self._order = itertools.count()
        self._closed = False
        _OPEN.add(self)

    def close(self) -> None:
        """The test is over: time stops for good, and a thread it left waiting (a daemon
        thread blocked in a try the test never let end) looks only now and then, not
        hundreds of times a second for the rest of the run."""
        with self._cond:
            self._closed = True
            self._cond.notify_all()
        _OPEN.discard(self)

    # --- the Clock, as the code under test sees it ---------------------------------------

    def now(self) -> float:
        with self._cond:
            return self._now

    def wall(self) -> float:
        return self.now() + self._wall_offset

    def sleep(self, seconds: float) -> None:
        self._block(lambda: False, seconds)

    def wait(self, event: threading.Event, seconds: float | None) -> bool:
        return self._block(event.is_set, seconds)

    def get(self, items: queue.Queue[Item], seconds: float | None) -> Item:
        deadline = math.inf if seconds is None else self.now() + seconds
        while True:
            try:
                return items.get_nowait()
            except queue.Empty:
                pass
            if not self._block(lambda: not items.empty(), deadline - self.now()):
                raise queue.Empty

    def later(self, seconds: float, function: Callable[..., Any], *args: Any) -> None:
        with self._cond:
            heapq.heappush(self._timers, (self._now + seconds, next(self._order), function,
                                          args))

    def _block(self, ready: Callable[[], bool], seconds: float | None) -> bool:
        me = threading.current_thread()
        with self._cond:
            deadline = math.inf if seconds is None else self._now + max(seconds, 0.0)
            self._waiting[me] = (deadline, ready)
            self._known.add(me)
            self._cond.notify_all()
            try:
                while True:
                    if ready():
                        return True
                    if self._now >= deadline:
                        return False
                    self._cond.wait(CLOSED_POLL if self._closed else POLL)
            finally:
                del self._waiting[me]
                self._cond.notify_all()

    # --- the test's side ------------------------------------------------------------------

    def advance(self, seconds: float) -> None:
        """Move time on by `seconds`, waking each thread (and running each `later`) at its
        time, in order."""
        with self._cond:
            target = self._now + seconds
        self.settle()
        while self._step(target):
            pass

    def advance_until(self, condition: Callable[[], bool], within: float) -> float:
        """Move time on, one wake-up at a time, until `condition()` holds: the time that
        took. AssertionError if it does not hold within `within` seconds."""
        with self._cond:
            start = self._now
        self.settle()
        while not condition():
            if not self._step(start + within):
                raise AssertionError(f"not so within {within} s of clock time")
        return self.now() - start

    def waiters(self, count: int, timeout: float = SETTLE) -> None:
        """Until `count` threads wait on the clock (threads just started reach their
        first wait)."""
        if not self._poll(lambda: len(self._quiet()) >= count, timeout):
            raise AssertionError(f"{len(self._waiting)} thread(s) wait on the clock, "
                                 f"not {count}")

    def settle(self) -> None:
        """Until every thread that waits on this clock waits again (or ended)."""
        me = threading.current_thread()
        if not self._poll(lambda: not self._busy(me), SETTLE):
            with self._cond:
                raise AssertionError(
                    "thread(s) did not wait on the clock again: "
                    f"{', '.join(t.name for t in self._busy(me))} (waiting for something "
                    "else: a real timer, a lock?)")

    def _poll(self, condition: Callable[[], bool], timeout: float) -> bool:
        """Whether `condition` (read under the lock) holds within `timeout` real seconds.
        Polled: a thread that ends tells nobody."""
        deadline = time.monotonic() + timeout
        with self._cond:
            while not condition():
                if time.monotonic() >= deadline:
                    return False
                self._cond.wait(POLL)
            return True

    def _quiet(self) -> list[threading.Thread]:
        return [thread for thread, (deadline, ready) in self._waiting.items()
                if deadline > self._now and not ready()]

    def _busy(self, me: threading.Thread) -> list[threading.Thread]:
        quiet = set(self._quiet())
        return [thread for thread in self._known
                if thread is not me and thread.is_alive() and thread not in quiet]

    def _step(self, target: float) -> bool:
        """To the next wake-up (or `target`, if none comes before): False once at
        `target` with nothing due."""
        with self._cond:
            due = min([deadline for deadline, _ in self._waiting.values()]
                      + [timer[0] for timer in self._timers[:1]] + [math.inf])
            if due > target:
                self._now = max(self._now, target)
                self._cond.notify_all()
                return False
            self._now = max(self._now, due)
            timers = []
            while self._timers and self._timers[0][0] <= self._now:
                timers.append(heapq.heappop(self._timers))
            self._cond.notify_all()
        for _, _, function, args in timers:
            function(*args)
        self.settle()
        return True


class InstantClock(FakeClock):
    """For code that waits on its caller's own thread (a retry's backoff, a deadline): each
    wait moves time on at once by what it would have waited, unless what it waits for has
    happened. `slept` lists those waits, in order."""

    def __init__(self, start: float = 1000.0, wall: float = 1_700_000_000.0) -> None:
        super().__init__(start, wall)
        self.slept: list[float] = []

    def _block(self, ready: Callable[[], bool], seconds: float | None) -> bool:
        if ready():
            return True
        if seconds is None:
            raise AssertionError("a wait without end on an InstantClock would never end")
        self.slept.append(seconds)
        with self._cond:
            self._now += max(seconds, 0.0)
        return False

"""clock.py: real time (briefly, with tiny waits), and the unit tests' clock
(tests/unit/fake_clock.py) that the rest of the unit layer leans on: time stands still
until the test moves it, each waiting thread wakes at its time, in order, and runs until
it waits again before time moves on."""

from __future__ import annotations

import queue
import threading
import time

import pytest

from etcd_compute.clock import SYSTEM, Clock
from tests.unit.fake_clock import FakeClock, InstantClock


def test_the_system_clock_is_real_time():
    assert isinstance(SYSTEM, Clock)
    assert abs(SYSTEM.now() - time.monotonic()) < 1 and abs(SYSTEM.wall() - time.time()) < 1
    event, items = threading.Event(), queue.Queue()
    assert SYSTEM.wait(event, 0.001) is False
    event.set()
    assert SYSTEM.wait(event, 10) is True
    with pytest.raises(queue.Empty):
        SYSTEM.get(items, 0.001)
    items.put("x")
    assert SYSTEM.get(items, 10) == "x"
    called = threading.Event()
    SYSTEM.later(0.001, called.set)
    assert called.wait(5)
    before = time.monotonic()
    SYSTEM.sleep(0.001)
    assert time.monotonic() > before


def test_fake_time_stands_still_until_moved():
    clock = FakeClock(start=50.0, wall=1000.0)
    assert (clock.now(), clock.wall()) == (50.0, 1000.0)
    clock.advance(2.5)
    assert (clock.now(), clock.wall()) == (52.5, 1002.5)


def ticker(clock: FakeClock, every: float, seen: list[tuple[str, float]], name: str,
           stopping: threading.Event) -> threading.Thread:
    def run() -> None:
        while not clock.wait(stopping, every):
            seen.append((name, clock.now()))
    thread = threading.Thread(target=run, name=name, daemon=True)
    thread.start()
    return thread


def test_waiting_threads_wake_at_their_times_in_order():
    clock, seen, stopping = FakeClock(start=0.0), [], threading.Event()
    ticker(clock, 1.5, seen, "slow", stopping)
    ticker(clock, 0.5, seen, "fast", stopping)
    clock.waiters(2)
    clock.advance(2.0)
    assert seen == [("fast", 0.5), ("fast", 1.0), ("slow", 1.5), ("fast", 1.5),
                    ("fast", 2.0)] or \
        seen == [("fast", 0.5), ("fast", 1.0), ("fast", 1.5), ("slow", 1.5), ("fast", 2.0)]
    assert clock.now() == 2.0
    stopping.set()


def test_a_set_event_or_a_queued_item_ends_a_wait_without_time_passing():
    clock, event, items = FakeClock(start=0.0), threading.Event(), queue.Queue()
    results: list[object] = []
    waiter = threading.Thread(target=lambda: results.append(clock.wait(event, 100)))
    getter = threading.Thread(target=lambda: results.append(clock.get(items, 100)))
    waiter.start(), getter.start()
    clock.waiters(2)
    event.set()
    items.put("item")
    waiter.join(5), getter.join(5)
    assert sorted(map(str, results)) == ["True", "item"] and clock.now() == 0.0


def test_a_wait_that_runs_out_says_so_at_its_time():
    clock, items = FakeClock(start=0.0), queue.Queue()
    results: list[tuple[str, float]] = []

    def get() -> None:
        try:
            clock.get(items, 3.0)
        except queue.Empty:
            results.append(("empty", clock.now()))

    def sleep() -> None:
        clock.sleep(2.0)
        results.append(("slept", clock.now()))

    threads = [threading.Thread(target=get), threading.Thread(target=sleep),
               threading.Thread(target=lambda: results.append(
                   ("waited", clock.wait(threading.Event(), 1.0) or clock.now())))]
    for thread in threads:
        thread.start()
    clock.waiters(3)
    clock.advance(5)
    assert results == [("waited", 1.0), ("slept", 2.0), ("empty", 3.0)]


def test_later_runs_at_its_time_on_the_tests_thread():
    clock, calls = FakeClock(start=0.0), []
    clock.later(1.5, lambda *args: calls.append((args, clock.now())), "a", 1)
    clock.advance(1.0)
    assert calls == []
    clock.advance(1.0)
    assert calls == [(("a", 1), 1.5)] and clock.now() == 2.0


def test_advance_until_gives_the_time_it_took_or_fails_naming_the_limit():
    clock, seen, stopping = FakeClock(start=0.0), [], threading.Event()
    ticker(clock, 0.25, seen, "t", stopping)
    clock.waiters(1)
    assert clock.advance_until(lambda: len(seen) == 3, within=5) == 0.75
    with pytest.raises(AssertionError, match="within 1 s"):
        clock.advance_until(lambda: False, within=1)
    stopping.set()


def test_a_thread_that_waits_for_something_else_after_waking_is_named(monkeypatch):
    monkeypatch.setattr("tests.unit.fake_clock.SETTLE", 0.05)
    clock, release = FakeClock(start=0.0), threading.Event()

    def wakes_then_blocks() -> None:
        clock.sleep(1.0)
        release.wait(10)  # a real wait the clock cannot see

    thread = threading.Thread(target=wakes_then_blocks, name="blocker", daemon=True)
    thread.start()
    clock.waiters(1)
    with pytest.raises(AssertionError, match="blocker"):
        clock.advance(2.0)
    release.set()
    thread.join(5)


def test_an_instant_clock_moves_time_by_each_wait_at_once():
    clock, event, items = InstantClock(start=0.0), threading.Event(), queue.Queue()
    clock.sleep(0.5)
    assert clock.wait(event, 1.0) is False
    with pytest.raises(queue.Empty):
        clock.get(items, 2.0)
    assert clock.now() == 3.5 and clock.slept == [0.5, 1.0, 2.0]
    event.set()
    items.put("x")
    assert clock.wait(event, 9) is True and clock.get(items, 9) == "x"
    assert clock.now() == 3.5  # what it waited for had happened: no time went by
    with pytest.raises(AssertionError, match="never end"):
        clock.wait(threading.Event(), None)


def test_a_closed_clock_stands_still_and_its_waiters_still_see_their_event():
    clock, event, results = FakeClock(start=0.0), threading.Event(), []
    waiter = threading.Thread(target=lambda: results.append(clock.wait(event, 1.0)))
    waiter.start()
    clock.waiters(1)
    clock.close()
    assert clock.now() == 0.0 and waiter.is_alive()
    event.set()  # seen at its next look (CLOSED_POLL)
    waiter.join(5)
    assert results == [True]

"""The one watch loop: resume, compaction, errors and backoff, cancel (against a fake client)."""

from __future__ import annotations

import queue
import threading
from collections.abc import Callable
from types import SimpleNamespace
from typing import Any

import pyetcd.exceptions
import pytest

from etcd_compute.errors import EtcdUnavailable
from etcd_compute.watching import Cancelled, PrefixWatch, on_owner_thread
from tests.unit.fakes import RpcError, delete_event, put_event

PREFIX = "/t/hosts/"


class Script:
    """What one subscription does: raise at once (`refuse`), or deliver `responses` (lists
    of events, or a header revision for a progress notification) then raise `fault`, or
    end cleanly (`end`), or wait until cancelled."""

    def __init__(self, *responses: list[Any] | int, fault: BaseException | None = None,
                 refuse: BaseException | None = None, end: bool = False):
        self.responses, self.fault, self.refuse, self.end = responses, fault, refuse, end


class FakeClient:
    """pyetcd's `watch_prefix_response` as the watch uses it, one script per subscription."""

    def __init__(self, *scripts: Script, on_idle: Callable[[], None] | None = None):
        self.scripts: queue.Queue[Script] = queue.Queue()
        for script in scripts:
            self.scripts.put(script)
        self.subscriptions: list[tuple[str, int, bool]] = []
        self.cancels = 0
        # Called when a subscription has no script left (the test decides what then).
        self.on_idle = on_idle

    def watch_prefix_response(self, prefix: str, start_revision: int = 0,
                              progress_notify: bool = False) -> tuple[Any, Any]:
        self.subscriptions.append((prefix, start_revision, progress_notify))
        try:
            script = self.scripts.get_nowait()
        except queue.Empty:
            script = Script()
            if self.on_idle:
                self.on_idle()
        if script.refuse is not None:
            raise script.refuse
        cancelled = threading.Event()

        def cancel() -> None:
            self.cancels += 1
            cancelled.set()

        def stream() -> Any:
            for item in script.responses:
                if isinstance(item, int):
                    yield SimpleNamespace(events=[], header=SimpleNamespace(revision=item))
                else:
                    yield SimpleNamespace(events=item, header=SimpleNamespace(revision=0))
            if script.fault is not None:
                raise script.fault
            if script.end:
                return
            cancelled.wait(5)
        return stream(), cancel


class Owner:
    """What owns a watch: a queue of events, a state to read again."""

    def __init__(self, revision: int = 100):
        self.events: list[Any] = []
        self.revision = revision
        self.resyncs = 0

    def on_event(self, event: Any) -> None:
        self.events.append(event)

    def resync(self) -> int:
        self.resyncs += 1
        return self.revision


class Sleeps:
    """An injected sleep: records each delay; cancels the watch after `limit` of them."""

    def __init__(self, limit: int = 100):
        self.delays: list[float] = []
        self.limit = limit
        self.watch: PrefixWatch | None = None

    def __call__(self, seconds: float) -> bool:
        self.delays.append(seconds)
        if len(self.delays) >= self.limit and self.watch is not None:
            self.watch.cancel()
        return self.watch is not None and self.watch.cancelled


def make(client: FakeClient, owner: Owner, start: int = 10, sleeps: Sleeps | None = None,
         **kwargs: Any) -> PrefixWatch:
    sleeps = sleeps or Sleeps()
    watch = PrefixWatch(SimpleNamespace(client=client), PREFIX, on_event=owner.on_event,
                        resync=owner.resync, start_revision=start, sleep=sleeps, **kwargs)
    sleeps.watch = watch
    return watch


def stop_when_idle(client: FakeClient, watch_of: Callable[[], PrefixWatch]) -> None:
    client.on_idle = lambda: watch_of().cancel()


def run(watch: PrefixWatch, client: FakeClient) -> None:
    """Run the watch on this thread until its scripts are used up (then it is cancelled)."""
    stop_when_idle(client, lambda: watch)
    watch.run()


def starts(client: FakeClient) -> list[int]:
    return [start for _prefix, start, _progress in client.subscriptions]


# --- resuming ----------------------------------------------------------------------------


def test_events_are_handed_over_in_order_and_the_watch_resumes_after_the_last():
    client = FakeClient(
        Script([put_event(PREFIX + "a", b"1", 10), put_event(PREFIX + "b", b"2", 10)],
               [delete_event(PREFIX + "a", 12)],
               fault=pyetcd.exceptions.ConnectionFailedError()),
        Script([put_event(PREFIX + "c", b"3", 15)], end=True))
    owner = Owner()
    watch = make(client, owner)
    run(watch, client)
    assert [e.key for e in owner.events] == [f"{PREFIX}{k}".encode() for k in "abac"]
    assert starts(client) == [10, 13, 16]
    assert owner.resyncs == 0
    assert all(progress for _prefix, _start, progress in client.subscriptions)


def test_a_progress_notification_moves_a_quiet_watch_on():
    client = FakeClient(Script(40, fault=pyetcd.exceptions.ConnectionFailedError()))
    owner = Owner()
    watch = make(client, owner)
    run(watch, client)
    assert starts(client) == [10, 41]
    assert owner.resyncs == 0


def test_a_member_behind_what_was_seen_makes_the_owner_read_again():
    client = FakeClient(
        Script([put_event(PREFIX + "a", b"", 50)],
               fault=pyetcd.exceptions.ConnectionFailedError()),
        Script(30),  # another member, its history behind revision 50 (restored, say)
        Script(end=True))
    owner = Owner(revision=60)
    watch = make(client, owner)
    run(watch, client)
    assert owner.resyncs == 1
    assert starts(client)[:3] == [10, 51, 61]


# --- compaction --------------------------------------------------------------------------


def test_compaction_at_subscription_reads_everything_again_and_resumes_after_that_read():
    client = FakeClient(Script(refuse=pyetcd.exceptions.RevisionCompactedError(77)),
                        Script([put_event(PREFIX + "x", b"", 101)], end=True))
    owner = Owner(revision=100)
    sleeps = Sleeps()
    watch = make(client, owner, sleeps=sleeps)
    run(watch, client)
    assert owner.resyncs == 1
    assert starts(client)[:2] == [10, 101]
    assert [e.key for e in owner.events] == [f"{PREFIX}x".encode()]
    assert len(sleeps.delays) == 1  # no waiting before the read (only after the clean end)


def test_compaction_in_the_middle_of_a_stream_does_the_same():
    client = FakeClient(
        Script([put_event(PREFIX + "a", b"", 11)],
               fault=pyetcd.exceptions.RevisionCompactedError(90)),
        Script(end=True))
    owner = Owner(revision=95)
    watch = make(client, owner)
    run(watch, client)
    assert owner.resyncs == 1
    assert starts(client)[:2] == [10, 96]


def test_compaction_never_retries_the_compacted_revision():
    """The bug of issue 18: 160 RevisionCompactedError lines in 40 s, from one revision."""
    compacted = [Script(refuse=pyetcd.exceptions.RevisionCompactedError(500))
                 for _ in range(3)]
    client = FakeClient(*compacted, Script(end=True))
    owner = Owner(revision=600)
    watch = make(client, owner)
    run(watch, client)
    assert starts(client).count(10) == 1
    assert 601 in starts(client)


def test_a_start_at_zero_reads_first():
    client = FakeClient(Script(end=True))
    owner = Owner(revision=5)
    watch = make(client, owner, start=0)
    run(watch, client)
    assert owner.resyncs == 1 and starts(client)[0] == 6


def test_a_read_that_fails_is_tried_again_after_a_backoff():
    client = FakeClient(Script(refuse=pyetcd.exceptions.RevisionCompactedError(9)),
                        Script(end=True))
    owner = Owner(revision=70)
    calls = []

    def resync() -> int:
        calls.append(1)
        if len(calls) < 3:
            raise EtcdUnavailable("etcd at x is unreachable")
        return 70

    sleeps = Sleeps()
    watch = PrefixWatch(SimpleNamespace(client=client), PREFIX, on_event=owner.on_event,
                        resync=resync, start_revision=10, sleep=sleeps)
    sleeps.watch = watch
    run(watch, client)
    assert len(calls) == 3
    assert sleeps.delays[:2] == [0.1, 0.2]
    assert starts(client)[:2] == [10, 71]


# --- errors and backoff ------------------------------------------------------------------


def test_unreachable_etcd_backs_off_doubling_up_to_the_most_and_starts_over_when_back():
    down = [Script(refuse=pyetcd.exceptions.ConnectionFailedError()) for _ in range(6)]
    client = FakeClient(*down, Script(end=True),
                        Script(refuse=RpcError(__import__("grpc").StatusCode.UNAVAILABLE)),
                        Script(end=True))
    owner = Owner()
    sleeps = Sleeps()
    watch = make(client, owner, sleeps=sleeps, first_delay=0.1, max_delay=1.0)
    run(watch, client)
    assert sleeps.delays[:6] == [0.1, 0.2, 0.4, 0.8, 1.0, 1.0]
    # Then a stream etcd confirmed (the backoff starts over) that ended cleanly, a refused
    # subscription right after it (the second in a row), a confirmed one that ended.
    assert sleeps.delays[6:9] == [0.1, 0.2, 0.1]
    assert set(starts(client)) == {10}


def test_a_loss_is_logged_once_not_at_every_retry(caplog):
    down = [Script(refuse=pyetcd.exceptions.ConnectionFailedError()) for _ in range(40)]
    client = FakeClient(*down, Script(end=True))
    now = [0.0]

    def sleep(seconds: float) -> bool:
        now[0] += seconds
        return False

    owner = Owner()
    watch = PrefixWatch(SimpleNamespace(client=client), PREFIX, on_event=owner.on_event,
                        resync=owner.resync, start_revision=10, sleep=sleep,
                        clock=lambda: now[0])
    caplog.set_level("INFO", logger="etcd_compute.watch")
    run(watch, client)
    lost = [r for r in caplog.records if "lost" in r.getMessage()]
    # 40 failures over ~37 s of backoff: one line, then one more after 30 s.
    assert len(lost) == 2
    assert any("following again" in r.getMessage() for r in caplog.records)


def test_a_bug_is_retried_a_few_times_then_the_owner_reads_again(caplog):
    """An event the owner cannot take (a bug) is delivered again, a bounded number of times;
    then the owner reads its state and the watch goes on past it."""
    bad = put_event(PREFIX + "bad", b"", 20)
    client = FakeClient(*[Script([bad]) for _ in range(5)], Script(end=True))
    owner = Owner(revision=30)
    failing = []

    def on_event(event: Any) -> None:
        failing.append(event)
        raise KeyError("a bug")

    sleeps = Sleeps()
    watch = PrefixWatch(SimpleNamespace(client=client), PREFIX, on_event=on_event,
                        resync=owner.resync, start_revision=10, sleep=sleeps, max_failures=5)
    sleeps.watch = watch
    caplog.set_level("ERROR", logger="etcd_compute.watch")
    run(watch, client)
    assert len(failing) == 5
    assert owner.resyncs == 1
    assert starts(client)[:6] == [10] * 5 + [31]


# --- cancel ------------------------------------------------------------------------------


def test_cancel_closes_the_stream_and_ends_run_at_once():
    client = FakeClient(Script())  # a quiet stream: waits
    owner = Owner()
    watch = make(client, owner)
    thread = watch.start()
    watching_started = threading.Event()
    for _ in range(100):
        if client.subscriptions:
            watching_started.set()
            break
        threading.Event().wait(0.01)
    assert watching_started.is_set()
    watch.cancel()
    thread.join(2)
    assert not thread.is_alive()
    assert client.cancels >= 1


def test_cancel_ends_a_backoff_wait():
    client = FakeClient(*[Script(refuse=pyetcd.exceptions.ConnectionFailedError())
                          for _ in range(50)])
    owner = Owner()
    watch = PrefixWatch(SimpleNamespace(client=client), PREFIX, on_event=owner.on_event,
                        resync=owner.resync, start_revision=10, first_delay=5, max_delay=5)
    thread = watch.start()
    for _ in range(100):
        if client.subscriptions:
            break
        threading.Event().wait(0.01)
    watch.cancel()
    thread.join(2)
    assert not thread.is_alive()
    assert len(client.subscriptions) == 1


# --- the owner's thread ------------------------------------------------------------------


def test_on_owner_thread_runs_the_read_where_the_owner_decides():
    jobs: queue.Queue[Callable[[], None]] = queue.Queue()
    ran_on: list[str] = []

    def work() -> int:
        ran_on.append(threading.current_thread().name)
        return 42

    resync = on_owner_thread(jobs.put, work, lambda: False)
    result: list[int] = []
    waiter = threading.Thread(target=lambda: result.append(resync()), name="watcher")
    waiter.start()
    jobs.get(timeout=2)()  # the owner's loop
    waiter.join(2)
    assert result == [42] and ran_on == [threading.current_thread().name]


def test_on_owner_thread_hands_the_owners_error_back_and_gives_up_when_cancelled():
    jobs: queue.Queue[Callable[[], None]] = queue.Queue()

    def work() -> int:
        raise EtcdUnavailable("down")

    resync = on_owner_thread(jobs.put, work, lambda: False)
    errors: list[BaseException] = []

    def wait() -> None:
        try:
            resync()
        except BaseException as exc:  # noqa: BLE001
            errors.append(exc)

    waiter = threading.Thread(target=wait)
    waiter.start()
    jobs.get(timeout=2)()
    waiter.join(2)
    assert isinstance(errors[0], EtcdUnavailable)

    stopped = threading.Event()
    resync = on_owner_thread(jobs.put, lambda: 1, stopped.is_set, poll=0.01)
    stopped.set()  # the owner stopped leading: nobody will run the job
    with pytest.raises(Cancelled):
        resync()

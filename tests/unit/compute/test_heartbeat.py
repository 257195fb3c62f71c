"""The heartbeat through etcd faults: a failed keep-alive is tried again soon (on the next
member), each try is bounded so that renewals outlast an etcd leader election before the
fence point, and a lease etcd forgot is replaced."""

from __future__ import annotations

import threading
import time

import pytest

from etcd_compute.compute.heartbeat import Heartbeat
from etcd_compute.compute.identity import HostIdentity
from etcd_compute.config import RENEWAL_RETRY_SECONDS as RETRY_SECONDS
from etcd_compute.config import HeartbeatTiming, heartbeat_timing
from etcd_compute.errors import ServiceUnavailable
from tests.unit.fakes import FakeStore

RP = "0b7ef0c5-2d8c-4b55-9d2b-5a4f0f4f3a11"


class FlakyStore(FakeStore):
    """Keep-alives fail `failures` times, then answer; each try is recorded."""

    def __init__(self, failures: int, etcd_timeout: float = 5.0):
        super().__init__()
        self.config = {"timeout": etcd_timeout, "election_seconds": 0}
        self.failures = failures
        self.tries: list[tuple[float, float]] = []  # (when, timeout asked for)
        self.answered = threading.Event()

    def keep_alive(self, lease_id: int, timeout: float) -> int:
        self.tries.append((time.monotonic(), timeout))
        if len(self.tries) <= self.failures:
            raise ServiceUnavailable("etcd at x is unreachable")
        self.answered.set()
        return self.leases.get(lease_id, 0)


def run(store: FlakyStore, ttl: int, until: threading.Event,
        margin: float = 1.0) -> Heartbeat:
    stopping = threading.Event()
    heartbeat = Heartbeat(store, {RP: HostIdentity(RP, "h")}, ttl, "fake", stopping, margin)
    heartbeat.start()
    until.wait(10)
    stopping.set()
    return heartbeat


def test_a_failed_keep_alive_is_tried_again_soon_not_an_interval_later():
    store = FlakyStore(failures=2)
    heartbeat = run(store, ttl=3, until=store.answered)
    assert heartbeat.timing.interval == 1.0
    (failed, _), (again, _), (third, _) = store.tries[:3]
    assert again - failed < RETRY_SECONDS + 0.5 < 1.0
    assert third - again < RETRY_SECONDS + 0.5


def test_each_try_is_the_timings_or_the_etcd_timeout():
    long_timeout = FlakyStore(failures=0, etcd_timeout=5.0)
    heartbeat = run(long_timeout, ttl=3, until=long_timeout.answered)
    assert long_timeout.tries[0][1] == heartbeat.timing.try_timeout == pytest.approx(0.8)
    short_timeout = FlakyStore(failures=0, etcd_timeout=0.3)
    run(short_timeout, ttl=3, until=short_timeout.answered)
    assert short_timeout.tries[0][1] == 0.3


# --- renewals across an etcd leader election ---------------------------------------------


def renewed_at(timing: HeartbeatTiming, election: float, round_trip: float = 0.05) -> float:
    """When a renewal first succeeds after the worst-timed leader kill: just before a renewal
    is due (the last success was an interval ago, at 0). The first try is lost on the dead
    member for its whole timeout (a silent member; a reset one fails at once, which is
    better); every later try goes to a follower, which holds it until the new leader answers
    (`election` after the kill) and fails it if its timeout comes first."""
    due = timing.interval
    elected = due + election
    start, end = due, due + timing.try_timeout  # lost on the dead member
    while True:
        start = end + timing.retry
        end = start + timing.try_timeout
        answered = max(start, elected) + round_trip
        if answered <= end:
            return answered


def old_timing(ttl: int, margin: float, etcd_timeout: float = 5.0) -> HeartbeatTiming:
    """What the heartbeat did before issue 18: a third of the TTL, tries as long."""
    interval = max(ttl / 3, 0.5)
    return HeartbeatTiming(interval, min(etcd_timeout, interval), RETRY_SECONDS, ttl - margin)


def test_the_issues_settings_fenced_on_a_leader_kill_and_are_refused_now():
    """TTL 6 s, margin 2 s: a renewal sent just after the kill waited its full 2 s try, and
    the 2 s interval plus 2 s reached the fence point (2 of 4 kills fenced). No timing
    fits an election of up to 4 s (two rounds) in its 4 s: refused; a 1 s margin fits."""
    assert renewed_at(old_timing(6, 2), 2.0) >= 4.0  # the fence point: it fenced
    etcd = {"timeout": 5.0, "election_seconds": 4.0}
    assert not heartbeat_timing({"heartbeat_ttl": 6, "fence_margin_seconds": 2}, etcd).workable
    timing = heartbeat_timing({"heartbeat_ttl": 6, "fence_margin_seconds": 1}, etcd)
    assert timing.workable and renewed_at(timing, 4.0) < timing.fence_after
    # An election of two rounds measured on the test cluster: 3.7 s.
    assert renewed_at(timing, 3.7) < timing.fence_after


def test_the_default_and_documented_settings_renew_through_an_election():
    for ttl, margin in ((10, 3), (6, 1), (6, 0.5)):
        timing = heartbeat_timing({"heartbeat_ttl": ttl, "fence_margin_seconds": margin},
                                  {"timeout": 5.0, "election_seconds": 4.0})
        assert timing.workable, (ttl, margin)
        assert renewed_at(timing, 4.0) < timing.fence_after, (ttl, margin)


@pytest.mark.parametrize("election", [0.0, 0.5, 1.0, 2.0, 3.0, 5.0])
@pytest.mark.parametrize("etcd_timeout", [0.5, 2.0, 5.0])
def test_every_timing_the_validator_accepts_renews_through_an_election(election, etcd_timeout):
    accepted = 0
    for ttl in range(2, 31):
        for tenths in range(5, ttl * 10, 5):
            settings = {"heartbeat_ttl": ttl, "fence_margin_seconds": tenths / 10}
            timing = heartbeat_timing(settings, {"timeout": etcd_timeout,
                                                 "election_seconds": election})
            if not timing.workable:
                continue
            accepted += 1
            assert timing.interval <= ttl / 3
            # Two tries fit between the due time and the fence point (one, with a single
            # member: there is no other to try).
            tries = 2 if election else 1
            assert timing.interval + tries * timing.try_timeout + timing.retry <= \
                timing.fence_after + 1e-9, settings
            if election and etcd_timeout >= election / 2:  # several members
                assert renewed_at(timing, election) < timing.fence_after, settings
    assert accepted


def test_a_lease_etcd_forgot_is_replaced_with_the_alive_key():
    store = FlakyStore(failures=0)
    stopping = threading.Event()
    heartbeat = Heartbeat(store, {RP: HostIdentity(RP, "h")}, 2, "fake", stopping, 0.5)
    heartbeat.start()
    first = heartbeat.lease.id
    store.expire(first)  # as etcd does when we were away longer than the TTL
    assert store.get(store.keys.alive(RP)) is None
    deadline = time.monotonic() + 5
    while store.get(store.keys.alive(RP)) is None and time.monotonic() < deadline:
        time.sleep(0.05)
    stopping.set()
    entry = store.get(store.keys.alive(RP))
    assert entry is not None and entry.lease == heartbeat.lease.id != first

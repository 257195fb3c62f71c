"""The heartbeat on a clock the test moves: renewals at their interval, a failed keep-alive
tried again soon (on the next member), each try bounded so that renewals outlast an etcd
leader election before the fence point; the fence at that point (not when the lease
expires), lifted by the next renewal; a lease etcd forgot is replaced."""

from __future__ import annotations

import math
import threading
from typing import Any

import pytest

from etcd_compute.compute.heartbeat import WATCHDOG_SECONDS, Heartbeat
from etcd_compute.compute.identity import HostIdentity
from etcd_compute.errors import ServiceUnavailable
from etcd_compute.heartbeat_timing import RENEWAL_RETRY_SECONDS as RETRY_SECONDS
from etcd_compute.heartbeat_timing import HeartbeatTiming, heartbeat_timing
from tests.unit.fake_clock import FakeClock
from tests.unit.fakes import FakeStore

RP = "0b7ef0c5-2d8c-4b55-9d2b-5a4f0f4f3a11"


class FlakyStore(FakeStore):
    """Keep-alives fail `failures` times (each after `lost` seconds of the try's timeout on
    the clock: a silent member), then answer; each try is recorded (clock time, timeout)."""

    def __init__(self, clock: FakeClock, failures: float, etcd_timeout: float = 5.0,
                 lost: float = 0.0):
        super().__init__()
        self.clock = clock
        self.config = {"timeout": etcd_timeout, "election_seconds": 0}
        self.failures, self.lost = failures, lost
        self.tries: list[tuple[float, float]] = []  # (when, timeout asked for)

    def keep_alive(self, lease_id: int, timeout: float) -> int:
        self.tries.append((self.clock.now(), timeout))
        if len(self.tries) <= self.failures:
            self.clock.sleep(self.lost * timeout)
            raise ServiceUnavailable("etcd at x is unreachable")
        return self.leases.get(lease_id, 0)


class Host:
    """A heartbeat running its threads on a clock that moves when the test says."""

    def __init__(self, ttl: int, margin: float, failures: float = 0, lost: float = 0.0,
                 etcd_timeout: float = 5.0):
        self.clock = FakeClock()
        self.store = FlakyStore(self.clock, failures, etcd_timeout, lost)
        self.stopping = threading.Event()
        self.seen: list[tuple[str, float]] = []  # fences and their lifting, when
        self.heartbeat = Heartbeat(
            self.store, {RP: HostIdentity(RP, "h")}, ttl, "fake", self.stopping, margin,
            on_fence=lambda: self.seen.append(("fence", self.clock.now())),
            on_unfence=lambda: self.seen.append(("unfence", self.clock.now())),
            clock=self.clock)
        self.started = self.clock.now()
        self.heartbeat.start()
        self.clock.waiters(2)  # the renewal loop and the watchdog

    def since_start(self, when: float) -> float:
        return round(when - self.started, 6)

    def tries(self) -> list[float]:
        return [self.since_start(when) for when, _ in self.store.tries]

    def stop(self) -> None:
        self.stopping.set()
        self.clock.advance(self.heartbeat.timing.try_timeout)  # a try under way ends


@pytest.fixture
def hosts() -> Any:
    started: list[Host] = []
    yield lambda *args, **kwargs: started.append(Host(*args, **kwargs)) or started[-1]
    for host in started:
        host.stop()


def test_renewals_come_every_interval_while_they_succeed(hosts):
    host = hosts(ttl=3, margin=1)
    assert host.heartbeat.timing.interval == 1.0
    host.clock.advance(3.5)
    assert host.tries() == [1.0, 2.0, 3.0]
    assert host.seen == [] and not host.heartbeat.fenced


def test_a_failed_keep_alive_is_tried_again_soon_not_an_interval_later(hosts):
    host = hosts(ttl=3, margin=1, failures=2)
    host.clock.advance_until(lambda: len(host.store.tries) == 4, within=5)
    # The first try is due an interval after the grant; each failed one is tried again
    # after RETRY_SECONDS; once answered, the next comes an interval later again.
    assert host.tries() == [1.0, 1.0 + RETRY_SECONDS, 1.0 + 2 * RETRY_SECONDS,
                            2.0 + 2 * RETRY_SECONDS]
    assert RETRY_SECONDS < host.heartbeat.timing.interval


def test_each_try_is_the_timings_or_the_etcd_timeout(hosts):
    long_timeout = hosts(ttl=3, margin=1, etcd_timeout=5.0)
    long_timeout.clock.advance(1.0)
    assert long_timeout.store.tries[0][1] == long_timeout.heartbeat.timing.try_timeout == \
        pytest.approx(0.8)
    short_timeout = hosts(ttl=3, margin=1, etcd_timeout=0.3)
    short_timeout.clock.advance(1.0)
    assert short_timeout.store.tries[0][1] == 0.3


# --- the fence ----------------------------------------------------------------------------


@pytest.mark.parametrize(("ttl", "margin", "lost"), [(3, 1, 0.0), (3, 1, 1.0), (10, 3, 1.0),
                                                     (6, 0.5, 0.5)])
def test_without_a_renewal_the_host_fences_at_the_fence_point_before_the_lease_can_expire(
        hosts, ttl, margin, lost):
    """etcd stops answering (each try failing at once, or lost for its whole timeout): the
    watchdog fences once `ttl - margin` passed since the last renewal was sent, within
    its tick, and well before etcd can expire the lease at `ttl`."""
    host = hosts(ttl=ttl, margin=margin, failures=math.inf, lost=lost)
    fenced_after = host.clock.advance_until(lambda: host.seen, within=ttl)
    last_renewal = host.heartbeat.last_ok - host.started  # the grant: nothing renewed
    assert last_renewal == 0
    assert ttl - margin <= fenced_after <= ttl - margin + WATCHDOG_SECONDS + 1e-6 < ttl
    assert host.seen == [("fence", host.started + fenced_after)] and host.heartbeat.fenced
    host.clock.advance(ttl)  # fenced once, however long it lasts
    assert [what for what, _ in host.seen] == ["fence"]


def test_the_fence_point_counts_from_the_last_renewal_that_succeeded(hosts):
    host = hosts(ttl=3, margin=1, failures=0)
    host.clock.advance(2.5)  # renewed at 1.0 and 2.0
    host.store.failures = math.inf
    fenced_after = host.clock.advance_until(lambda: host.seen, within=3)
    assert 2.0 + 2.0 <= 2.5 + fenced_after <= 2.0 + 2.0 + WATCHDOG_SECONDS + 1e-6


def test_a_renewal_that_succeeds_again_lifts_the_fence_once(hosts):
    host = hosts(ttl=3, margin=1, failures=math.inf)
    host.clock.advance_until(lambda: host.seen, within=3)
    host.store.failures = len(host.store.tries)  # etcd answers from the next try on
    host.clock.advance_until(lambda: len(host.seen) == 2, within=1)
    (fence, _), (unfence, lifted) = host.seen
    assert (fence, unfence) == ("fence", "unfence") and not host.heartbeat.fenced
    assert host.heartbeat.last_ok == host.store.tries[-1][0] == lifted
    host.clock.advance(3)
    assert len(host.seen) == 2


def test_a_lease_etcd_forgot_is_fenced_and_replaced_with_the_alive_key(hosts):
    host = hosts(ttl=3, margin=1)
    first = host.heartbeat.lease.id
    host.store.expire(first)  # as etcd does when we were away longer than the TTL
    assert host.store.get(host.store.keys.alive(RP)) is None
    host.clock.advance(1.0)  # the next renewal finds the lease gone
    entry = host.store.get(host.store.keys.alive(RP))
    assert entry is not None and entry.lease == host.heartbeat.lease.id != first
    # Our instances may be on their way elsewhere: fenced first, lifted with the new lease.
    assert [what for what, _ in host.seen] == ["fence", "unfence"]


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

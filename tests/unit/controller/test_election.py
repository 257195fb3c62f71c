"""Leader election: one leader at a time, handover when its lease goes, and no acting past
the time its lease could have run out."""

from __future__ import annotations

import pytest

from etcd_compute.controller.election import Election
from tests.unit.fake_clock import FakeClock
from tests.unit.fakes import FakeStore


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


def test_only_one_of_two_candidates_leads(clock):
    store = FakeStore()
    first, second = (Election(store, 10, name, clock=clock) for name in ("a", "b"))
    assert first.campaign() and first.is_leader
    assert not second.campaign() and not second.is_leader
    assert first.leader()["name"] == "a"
    # The loser's lease is not left behind.
    assert list(store.leases) == [first.lease.id]


def test_a_standby_takes_over_when_the_leaders_lease_expires(clock):
    store = FakeStore()
    first, second = (Election(store, 10, name, clock=clock) for name in ("a", "b"))
    first.campaign()
    store.expire(first.lease.id)  # the leader died: etcd drops its lease and key
    assert second.campaign() and second.leader()["name"] == "b"
    assert not first.refresh() and not first.is_leader


def test_a_leader_that_cannot_refresh_stops_before_its_lease_could_end(clock, monkeypatch):
    store = FakeStore()
    leader = Election(store, 10, "a", clock=clock)
    leader.campaign()
    clock.advance(5)
    assert leader.refresh() and leader.is_leader

    def unreachable(lease_id, timeout):
        raise ConnectionError("etcd down")

    monkeypatch.setattr(store, "keep_alive", unreachable)
    clock.advance(3)
    assert leader.refresh() and leader.is_leader  # still within what it can vouch for
    clock.advance(6)  # 9 s since the last good refresh of a 10 s lease
    assert not leader.is_leader


def test_resign_hands_over_at_once(clock):
    store = FakeStore()
    first, second = (Election(store, 10, name, clock=clock) for name in ("a", "b"))
    first.campaign()
    first.resign()
    assert not first.is_leader and second.campaign()


def test_a_refresh_after_a_pause_confirms_the_lease_again(clock, monkeypatch):
    """A leader frozen (or cut off) past what it could vouch for leads again as soon as
    etcd says its lease lives: it does not wait for the lease to run out and campaign."""
    store = FakeStore()
    leader = Election(store, 3, "a", clock=clock)
    leader.campaign()
    clock.advance(2.5)  # frozen: past (3 - 1) * 0.9 s
    assert not leader.is_leader and leader.lease is not None
    assert leader.refresh() and leader.is_leader


def test_each_refresh_try_may_take_the_etcd_timeout(clock, monkeypatch):
    """A slow path to etcd (a proxy holding each request a second) must not cost the lead."""
    store = FakeStore()
    store.config = {"timeout": 5.0}
    asked = []
    monkeypatch.setattr(store, "keep_alive", lambda lease, timeout: asked.append(timeout) or 10)
    leader = Election(store, 3, "a", clock=clock)
    leader.campaign()
    leader.refresh()
    assert asked == [5.0]

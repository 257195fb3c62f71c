"""The heartbeat through etcd faults: a failed keep-alive is tried again soon (on the next
member), each try is bounded well within the TTL, and a lease etcd forgot is replaced."""

from __future__ import annotations

import threading
import time

from etcd_compute.compute.heartbeat import RETRY_SECONDS, Heartbeat
from etcd_compute.compute.identity import HostIdentity
from etcd_compute.errors import ServiceUnavailable
from tests.unit.fakes import FakeStore

RP = "0b7ef0c5-2d8c-4b55-9d2b-5a4f0f4f3a11"


class FlakyStore(FakeStore):
    """Keep-alives fail `failures` times, then answer; each try is recorded."""

    def __init__(self, failures: int, etcd_timeout: float = 5.0):
        super().__init__()
        self.config = {"timeout": etcd_timeout}
        self.failures = failures
        self.tries: list[tuple[float, float]] = []  # (when, timeout asked for)
        self.answered = threading.Event()

    def keep_alive(self, lease_id: int, timeout: float) -> int:
        self.tries.append((time.monotonic(), timeout))
        if len(self.tries) <= self.failures:
            raise ServiceUnavailable("etcd at x is unreachable")
        self.answered.set()
        return self.leases.get(lease_id, 0)


def run(store: FlakyStore, ttl: int, until: threading.Event) -> Heartbeat:
    stopping = threading.Event()
    heartbeat = Heartbeat(store, {RP: HostIdentity(RP, "h")}, ttl, "fake", stopping)
    heartbeat.start()
    until.wait(10)
    stopping.set()
    return heartbeat


def test_a_failed_keep_alive_is_tried_again_soon_not_a_third_of_the_ttl_later():
    store = FlakyStore(failures=2)
    run(store, ttl=3, until=store.answered)
    (failed, _), (again, _), (third, _) = store.tries[:3]
    assert again - failed < RETRY_SECONDS + 0.5 < 1.0  # 1.0: a third of the TTL
    assert third - again < RETRY_SECONDS + 0.5


def test_each_try_is_bounded_by_a_third_of_the_ttl_or_the_etcd_timeout():
    long_timeout = FlakyStore(failures=0, etcd_timeout=5.0)
    run(long_timeout, ttl=3, until=long_timeout.answered)
    assert long_timeout.tries[0][1] == 1.0
    short_timeout = FlakyStore(failures=0, etcd_timeout=0.5)
    run(short_timeout, ttl=3, until=short_timeout.answered)
    assert short_timeout.tries[0][1] == 0.5


def test_a_lease_etcd_forgot_is_replaced_with_the_alive_key():
    store = FlakyStore(failures=0)
    stopping = threading.Event()
    heartbeat = Heartbeat(store, {RP: HostIdentity(RP, "h")}, 1, "fake", stopping)
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

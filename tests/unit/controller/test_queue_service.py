"""The service's loop over fakes: it opens the queue under the leader's lease, drains it in
passes, and survives a pass that fails."""

from __future__ import annotations

import uuid as uuidlib

from etcd_compute import messages
from etcd_compute.controller.election import Election
from etcd_compute.controller.queue_service import (
    IDLE_SECONDS,
    PAUSED_SECONDS,
    QueueService,
)
from etcd_compute.etcd import SharedLease
from etcd_compute.scheduler.queue import request_message
from etcd_compute.scheduler.spec import RequestSpec
from tests.unit.controller.test_batcher import QUERY, Service
from tests.unit.fake_clock import FakeClock


def leading_service() -> tuple[Service, QueueService]:
    """The service's loop, leading, on a clock the test moves (`queue.clock`)."""
    service, clock = Service(), FakeClock()
    service.store.delete(service.store.keys.leader())
    election = Election(service.store, ttl=10, name="test", clock=clock)
    assert election.campaign()
    service.cache.load(service.store)
    queue = QueueService(service.store, service.placement, service.scheduler, election,
                         service.cache, service.settings, clock=clock)
    return service, queue


def ask(service: Service) -> str:
    name = str(uuidlib.uuid4())
    service.store.put(messages.SCHEDULE_REQUEST, service.store.keys.queue_request(name),
                      request_message(RequestSpec.build(QUERY), "test"))
    return name


def test_the_queue_is_open_while_the_leader_lease_lives():
    service, queue = leading_service()
    queue.open()
    entry = service.store.get(service.store.keys.queue_open())
    assert entry is not None and entry.lease == queue.election.lease.id
    queue.election.resign()  # the lease goes, and the open key with it
    assert service.store.get(service.store.keys.queue_open()) is None


def test_a_pass_answers_everything_pending():
    service, queue = leading_service()
    names = [ask(service) for _ in range(3)]
    assert queue.drain() == 3
    assert all(service.answer(n) for n in names)
    assert queue.drain() == 0  # nothing left


def test_the_loop_survives_a_failing_pass_and_answers_afterwards(monkeypatch):
    service, queue = leading_service()
    real = queue.batcher.run
    failures = []

    def fail_once(pending):
        if not failures:
            failures.append(1)
            raise RuntimeError("boom")
        return real(pending)

    monkeypatch.setattr(queue.batcher, "run", fail_once)
    name = ask(service)
    queue.start()
    try:
        queue.clock.waiters(1)  # the first pass failed: it waits a second
        assert failures and service.answer(name) is None
        # Then it waits for a request event, or looks anyway after IDLE_SECONDS.
        took = queue.clock.advance_until(lambda: service.answer(name) is not None, within=5)
        assert took == 1.0 + IDLE_SECONDS
    finally:
        queue.stop()


def test_one_answer_lease_serves_many_answers_until_a_quarter_of_its_ttl():
    service, queue = leading_service()
    lease = SharedLease(service.store, 3600, queue.clock)
    first = lease()
    queue.clock.advance(900)
    assert lease() == first
    queue.clock.advance(1)
    assert lease() != first


def test_the_loop_follows_leadership_closing_the_queue_and_serving_again():
    """A blip under the lease's TTL: the loop used to return for good, leaving /queue/open
    to clients nobody answered. Now it closes the queue and serves again once it leads."""
    service, queue = leading_service()
    clock, open_key = queue.clock, service.store.keys.queue_open()
    queue.start()
    try:
        clock.waiters(1)  # serving, waiting for a request
        assert queue.serving
        assert service.store.get(open_key).lease == queue.election.lease.id
        leading_until = queue.election._valid_until
        queue.election._valid_until = 0.0  # unconfirmed: the process was frozen, say
        clock.advance_until(lambda: not queue.serving, within=IDLE_SECONDS)
        assert service.store.get(open_key) is None  # nobody may queue for a loop not serving
        paused = ask(service)
        queue.wake()
        clock.advance(5)
        assert service.answer(paused) is None  # nothing answered while it may not lead
        queue.election._valid_until = leading_until  # a refresh confirmed the lease
        took = clock.advance_until(lambda: service.answer(paused) is not None, within=1)
        assert took <= PAUSED_SECONDS  # it looks again that often
        assert service.store.get(open_key) is not None
    finally:
        queue.stop()
    assert service.store.get(open_key) is None  # closed when the loop stops


def test_a_loop_that_finds_the_leader_key_not_its_own_resigns():
    service, queue = leading_service()
    service.store.delete(service.store.keys.leader())  # deleted by hand, say
    queue.start()
    queue._thread.join(5)
    assert not queue._thread.is_alive()
    assert queue.election.lease is None  # resigned: the controller campaigns afresh
    assert service.store.get(service.store.keys.queue_open()) is None

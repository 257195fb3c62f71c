"""controller/serve.py: the controller daemon against in-memory etcd and Placement: which watch
events reach the controller, how a failed event is retried, leading (sweep, then follow from
what the sweep read; recovery ticks; act on nothing while leadership is unconfirmed, lead on
once it is confirmed again, stop once the lease is gone), the watch reading everything again
after a compaction, and the run loop. What the controller decides: test_decisions.py; the
daemon as processes with a real etcd: tests/scheduler."""

from __future__ import annotations

import logging
import threading
import uuid as uuidlib
from typing import Any

import pyetcd.exceptions
import pytest

from etcd_compute.config import deep_merge
from etcd_compute.controller import serve
from etcd_compute.controller.serve import ControllerService
from etcd_compute.defaults import SCHEDULE_DEFAULTS
from etcd_compute.errors import EtcdUnavailable, PlacementUnavailable
from tests.support import wait_for
from tests.unit.fake_clock import FakeClock
from tests.unit.fakes import FakePlacement, WatchedStore, delete_event, put_event

HOST, INSTANCE = str(uuidlib.uuid4()), str(uuidlib.uuid4())


@pytest.fixture
def service(monkeypatch: pytest.MonkeyPatch) -> ControllerService:
    store, placement = WatchedStore("/t"), FakePlacement()
    monkeypatch.setattr(serve, "Store", lambda _settings: store)
    monkeypatch.setattr(serve, "PlacementClient", lambda _settings: placement)
    config = deep_merge(SCHEDULE_DEFAULTS, {"etcd": {"prefix": "/t"},
                                            "scheduler": {"controller_lease_ttl": 3}})
    service = ControllerService(config, clock=FakeClock())
    yield service
    service.stop()
    service.store.cancel_watches()


def queued(service: ControllerService) -> list[tuple[Any, tuple[Any, ...]]]:
    found = []
    while not service.events.empty():
        found.append(service.events.get_nowait())
    return found


class Leading:
    """`_lead` in a thread, as `run` calls it once the election is won."""

    def __init__(self, service: ControllerService):
        self.service = service
        assert service.election.campaign()
        self.thread = threading.Thread(target=service._lead, daemon=True)
        self.thread.start()

    def watching(self, subscriptions: int = 1) -> None:
        """Until the watch (everything under the prefix) subscribed `subscriptions` times."""
        wait_for(lambda: len(self.service.store.watched_from) >= subscriptions, 5,
                 what="the watch")
        # ... and the lead's loop (and the scheduler service's) wait on the clock.
        self.service.clock.waiters(2 if self.service.service else 1)

    def stop(self) -> bool:
        """Stop the service; the lead ends at its next look (a tick later)."""
        self.service.stop()
        self.service.clock.advance(serve.RECOVERY_TICK_SECONDS)
        return self.ended()

    def ended(self, timeout: float = 5) -> bool:
        self.thread.join(timeout)
        return not self.thread.is_alive()


# -- which events reach the controller -------------------------------------------------------


def test_heartbeats_and_records_reach_the_controller_and_nothing_else(service):
    keys, controller = service.store.keys, service.controller
    for event in (put_event(keys.alive(HOST), b"{}", 5), delete_event(keys.alive(HOST), 6),
                  put_event(keys.record(HOST, INSTANCE), b"{}", 7),
                  delete_event(keys.record(HOST, INSTANCE), 8),
                  put_event(keys.spec(HOST, INSTANCE), b"{}", 9),  # a host's business
                  put_event(keys.console(HOST, INSTANCE), b"{}", 10),
                  put_event(keys.host(HOST) + "junk", b"", 11),
                  put_event(keys.hosts() + "records", b"", 12)):
        service._queue(event)
    assert queued(service) == [(controller.on_alive, (HOST, True)),
                               (controller.on_alive, (HOST, False)),
                               (controller.on_record, (HOST, INSTANCE)),
                               (controller.on_record_gone, (HOST, INSTANCE))]


# -- handling an event -----------------------------------------------------------------------


def test_an_event_that_met_an_unreachable_service_is_tried_again_a_second_later(service):
    def unreachable(host: str) -> None:
        raise PlacementUnavailable("Placement at http://p is unreachable")

    service._dispatch(unreachable, (HOST,))
    service.clock.advance(0.99)
    assert queued(service) == []
    service.clock.advance(0.01)
    assert queued(service) == [(unreachable, (HOST,))]


def test_an_unexpected_error_is_logged_and_the_loop_goes_on(service, caplog):
    def broken() -> None:
        raise KeyError("a bug")

    service._dispatch(broken, ())
    assert "unexpected error handling broken" in caplog.text
    service.clock.advance(60)
    assert queued(service) == []  # not retried


# -- leading ---------------------------------------------------------------------------------


def test_the_leader_sweeps_then_follows_changes_from_what_the_sweep_read(service, caplog):
    caplog.set_level(logging.INFO, logger="etcd_compute.controller")
    keys, store = service.store.keys, service.store
    store.put_raw(keys.record(HOST, INSTANCE), "{}")  # what it holds does not matter here
    revision = store.revision + 1  # the leader key is written when it wins
    store.script_watch(keys.everything(),
                       [put_event(keys.alive(HOST), b"{}", revision + 1)])
    leading = Leading(service)
    leading.watching()
    assert store.watched_from == [(keys.everything(), revision + 1)]
    # The sweep found a host with a record and no heartbeat; its heartbeat came back since.
    wait_for(lambda: f"host {HOST} is back" in caplog.text, 5, what="the heartbeat")
    assert caplog.text.index("lost its heartbeat") < caplog.text.index("is back")
    assert leading.stop()
    assert queued(service) == []


def test_a_sweep_that_fails_gives_leadership_up_at_once(service, monkeypatch, caplog):
    def unreachable() -> dict[str, int]:
        raise EtcdUnavailable("etcd at 127.0.0.1:2379 is unreachable")

    monkeypatch.setattr(service.controller, "sweep", unreachable)
    leading = Leading(service)
    assert leading.ended()
    assert not service.election.is_leader
    assert service.store.get(service.store.keys.leader()) is None  # a standby takes over now
    assert service.store.watched_from == []
    assert "sweep failed (etcd at 127.0.0.1:2379 is unreachable); giving up leadership" in \
        caplog.text


def test_hosts_due_for_recovery_are_looked_for_several_times_a_second(service, monkeypatch):
    clock, ticks = service.clock, []
    monkeypatch.setattr(service.controller, "recover_due", lambda: ticks.append(clock.now()))
    start = clock.now()
    leading = Leading(service)
    leading.watching()
    clock.advance(1.05)
    assert [round(tick - start, 6) for tick in ticks] == [0.0, 0.2, 0.4, 0.6, 0.8, 1.0]
    assert leading.stop()


def test_a_leader_whose_lease_etcd_forgot_stops(service):
    leading = Leading(service)
    leading.watching()
    service.store.expire(service.election.lease.id)  # etcd lost it (a partition, say)
    service.clock.advance(service.election.ttl / 3 - 0.1)
    assert not leading.ended(timeout=0)
    service.clock.advance(0.2)  # seen at the next refresh (a third of the TTL)
    assert leading.ended()
    assert not service.election.is_leader


def test_an_event_that_arrives_once_leadership_is_lost_is_not_acted_on(service):
    handled: list[str] = []
    leading = Leading(service)
    leading.watching()
    service.election._lost("a test")  # what a refresh finding the lease gone does
    for event in ("one", "two"):  # a new leader handles them: they are dropped here
        service.events.put((handled.append, (event,)))
    assert leading.ended()
    assert handled == [] and queued(service) == []


def test_a_leader_that_was_frozen_acts_on_nothing_then_leads_on_once_its_lease_is_confirmed(
        service, monkeypatch, caplog):
    """A blip (the process frozen past what it could vouch for, its lease alive in etcd):
    the lead goes on, the scheduler service with it; nothing is acted on meanwhile. It used
    to end the lead, and with it the service, for good while the controller led on."""
    caplog.set_level(logging.INFO, logger="etcd_compute.controller")
    handled: list[str] = []
    leading = Leading(service)
    leading.watching()
    wait_for(lambda: service.service.serving, 5, what="the scheduler service")
    confirm = threading.Event()
    real_refresh = service.election.refresh
    monkeypatch.setattr(service.election, "refresh",
                        lambda: real_refresh() if confirm.is_set() else False)
    with service.election._lock:
        service.election._valid_until = 0.0  # frozen past what it could vouch for
    service.events.put((handled.append, ("during",)))
    clock = service.clock
    clock.advance_until(lambda: not service.service.serving, within=1)
    assert service.store.get(service.store.keys.queue_open()) is None  # the queue closed
    clock.advance(5)  # unconfirmed for a while: nothing happens
    assert handled == [] and leading.thread.is_alive() and not service.service.serving
    confirm.set()
    # Asked again within PAUSED_REFRESH_SECONDS, confirmed, and the event acted on.
    assert clock.advance_until(lambda: handled == ["during"], within=1) <= \
        serve.PAUSED_REFRESH_SECONDS
    clock.advance_until(lambda: service.service.serving, within=1)
    assert service.store.get(service.store.keys.queue_open()) is not None
    assert service.store.watched_from[-1:] == service.store.watched_from[:1]  # one watch
    assert "leadership confirmed again" in caplog.text
    assert leading.stop()


# -- the watch -------------------------------------------------------------------------------


def test_history_etcd_compacted_is_read_again_by_the_leader_and_followed_after_that(service,
                                                                                   caplog):
    """The bug of issue 18: the controller retried a compacted revision forever, blind."""
    caplog.set_level(logging.INFO, logger="etcd_compute.controller")
    keys, store = service.store.keys, service.store
    store.script_watch(keys.everything(), fault=pyetcd.exceptions.RevisionCompactedError(50))
    subscribe = store.client.watch_prefix_response

    def written_meanwhile(prefix: str, start_revision: int, **kwargs: Any) -> Any:
        if not store.watched_from:  # a change etcd compacted away before we saw it
            store.put_raw(keys.record(HOST, INSTANCE), "{}")
        return subscribe(prefix, start_revision, **kwargs)

    store.client.watch_prefix_response = written_meanwhile
    read_everything, reads = service.read_everything, []
    service.read_everything = lambda: reads.append(read_everything()) or reads[-1]
    leading = Leading(service)
    leading.watching(2)
    first, again = store.watched_from[:2]
    assert len(reads) == 2  # at the start of the lead, and again after the compaction
    assert again[1] == reads[1] + 1 > first[1]  # after what the read saw: not the same one
    assert caplog.text.count("sweep:") == 2
    assert "reading everything again" in caplog.text
    assert leading.stop()


# -- the daemon ------------------------------------------------------------------------------


def test_run_campaigns_again_after_etcd_was_unreachable_and_cleans_up_on_stop(service):
    attempts: list[int] = []

    def campaign() -> bool:
        attempts.append(1)
        if len(attempts) == 1:
            raise EtcdUnavailable("etcd at 127.0.0.1:2379 is unreachable")
        service.stop()
        return False

    service.election.campaign = campaign  # type: ignore[method-assign]
    runner = threading.Thread(target=service.run, kwargs={"install_signal_handlers": False})
    runner.start()
    service.clock.waiters(1)  # after the first attempt
    assert len(attempts) == 1
    service.clock.advance(1.0)  # tried again a second later
    runner.join(5)
    assert not runner.is_alive()
    assert len(attempts) == 2 and service.store.closed


def test_run_leads_until_stopped_then_resigns(service):
    runner = threading.Thread(target=service.run, kwargs={"install_signal_handlers": False},
                              daemon=True)
    runner.start()
    wait_for(lambda: service.election.is_leader, 5, what="leadership")
    assert service.election.leader()["name"] == service.election.name
    service.stop()
    service.clock.advance(serve.RECOVERY_TICK_SECONDS)  # the lead's next look
    runner.join(5)
    assert not runner.is_alive() and service.store.closed
    assert service.store.get(service.store.keys.leader()) is None

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
from types import SimpleNamespace
from typing import Any

import pyetcd.exceptions
import pytest

from etcd_compute.config import SCHEDULE_DEFAULTS, deep_merge
from etcd_compute.controller import serve
from etcd_compute.controller.serve import ControllerService
from etcd_compute.errors import EtcdUnavailable, PlacementUnavailable
from tests.support import wait_for
from tests.unit.fakes import FakePlacement, WatchedStore, delete_event, put_event

HOST, INSTANCE = str(uuidlib.uuid4()), str(uuidlib.uuid4())


class NoWait(threading.Event):
    """`stopping` whose waits do not wait (a retry or resubscription is at once)."""

    def wait(self, timeout: float | None = None) -> bool:
        return self.is_set()


@pytest.fixture
def service(monkeypatch: pytest.MonkeyPatch) -> ControllerService:
    store, placement = WatchedStore("/t"), FakePlacement()
    monkeypatch.setattr(serve, "Store", lambda _settings: store)
    monkeypatch.setattr(serve, "PlacementClient", lambda _settings: placement)
    config = deep_merge(SCHEDULE_DEFAULTS, {"etcd": {"prefix": "/t"},
                                            "scheduler": {"controller_lease_ttl": 3}})
    service = ControllerService(config)
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


def test_an_event_that_met_an_unreachable_service_is_tried_again_a_second_later(service,
                                                                              monkeypatch):
    timers: list[tuple[Any, ...]] = []
    monkeypatch.setattr(serve.threading, "Timer", lambda *args: (
        timers.append(args) or SimpleNamespace(start=lambda: None)))

    def unreachable(host: str) -> None:
        raise PlacementUnavailable("Placement at http://p is unreachable")

    service._dispatch(unreachable, (HOST,))
    assert timers == [(1.0, service.events.put, ((unreachable, (HOST,)),))]


def test_an_unexpected_error_is_logged_and_the_loop_goes_on(service, monkeypatch, caplog):
    monkeypatch.setattr(serve.threading, "Timer", lambda *_a: pytest.fail("retried"))

    def broken() -> None:
        raise KeyError("a bug")

    service._dispatch(broken, ())
    assert "unexpected error handling broken" in caplog.text


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
    service.stop()
    assert leading.ended()
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
    ticks: list[int] = []
    monkeypatch.setattr(service.controller, "recover_due", lambda: ticks.append(1) or [])
    leading = Leading(service)
    leading.watching()
    wait_for(lambda: len(ticks) >= 3, 2 * 3 * serve.RECOVERY_TICK_SECONDS + 1,
             what="three recovery ticks")
    service.stop()
    assert leading.ended()


def test_a_leader_whose_lease_etcd_forgot_stops(service):
    leading = Leading(service)
    leading.watching()
    service.store.expire(service.election.lease.id)  # etcd lost it (a partition, say)
    assert leading.ended(timeout=service.election.ttl)  # seen at the next refresh
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
    wait_for(lambda: not service.service.serving, 5, what="the service to pause")
    assert service.store.get(service.store.keys.queue_open()) is None  # the queue closed
    assert handled == [] and leading.thread.is_alive()
    confirm.set()
    wait_for(lambda: handled == ["during"], 5, what="the event, once leading again")
    wait_for(lambda: service.service.serving, 5, what="the service to serve again")
    assert service.store.get(service.store.keys.queue_open()) is not None
    assert service.store.watched_from[-1:] == service.store.watched_from[:1]  # one watch
    assert "leadership confirmed again" in caplog.text
    service.stop()
    assert leading.ended()


# -- the watch -------------------------------------------------------------------------------


def test_history_etcd_compacted_is_read_again_by_the_leader_and_followed_after_that(service,
                                                                                   caplog):
    """The bug of issue 18: the controller retried a compacted revision forever, blind."""
    caplog.set_level(logging.INFO, logger="etcd_compute.controller")
    keys, store = service.store.keys, service.store
    store.script_watch(keys.everything(), fault=pyetcd.exceptions.RevisionCompactedError(50))
    leading = Leading(service)
    leading.watching(2)
    first, again = store.watched_from[:2]
    assert again[1] > first[1]  # after what the second read saw, not the compacted revision
    assert again[1] == store.revision + 1
    assert caplog.text.count("sweep:") == 2
    assert "reading everything again" in caplog.text
    service.stop()
    assert leading.ended()


# -- the daemon ------------------------------------------------------------------------------


def test_run_campaigns_again_after_etcd_was_unreachable_and_cleans_up_on_stop(service):
    attempts: list[int] = []

    def campaign() -> bool:
        attempts.append(1)
        if len(attempts) == 1:
            raise EtcdUnavailable("etcd at 127.0.0.1:2379 is unreachable")
        service.stop()
        return False

    service.stopping = NoWait()
    service.election.campaign = campaign  # type: ignore[method-assign]
    assert service.run(install_signal_handlers=False) == 0
    assert len(attempts) == 2 and service.store.closed


def test_run_leads_until_stopped_then_resigns(service):
    runner = threading.Thread(target=service.run, kwargs={"install_signal_handlers": False},
                              daemon=True)
    runner.start()
    wait_for(lambda: service.election.is_leader, 5, what="leadership")
    assert service.election.leader()["name"] == service.election.name
    service.stop()
    runner.join(5)
    assert not runner.is_alive() and service.store.closed
    assert service.store.get(service.store.keys.leader()) is None

"""The controller's metrics: events by kind and result, reschedules by result, the leader
gauge, and serving them."""

from __future__ import annotations

import queue
import urllib.request
from types import SimpleNamespace
from typing import Any

import pytest
from prometheus_client import REGISTRY

from etcd_compute.config import deep_merge
from etcd_compute.controller import metrics as sm
from etcd_compute.controller.decisions import Controller
from etcd_compute.controller.serve import ControllerService
from etcd_compute.defaults import SCHEDULE_DEFAULTS
from etcd_compute.errors import PlacementUnavailable
from tests.support import stop_server
from tests.unit.controller.test_decisions import Cluster
from tests.unit.fake_clock import FakeClock
from tools.local_services import free_port


def sample(name: str, **labels: str) -> float:
    return REGISTRY.get_sample_value(name, labels) or 0.0


def actions(result: str, action: str = "reschedule") -> float:
    return sample("etcd_compute_controller_actions_total", action=action, result=result)


def events(kind: str, result: str = "ok") -> float:
    return sample("etcd_compute_controller_events_total", kind=kind, result=result)


def test_events_are_counted_by_the_handlers_kind_and_result():
    controller = Controller.__new__(Controller)
    before = events("record"), events("record_gone", "error"), events("other")
    sm.event_handled(controller.on_record)
    sm.event_handled(controller.on_record_gone, "error")
    sm.event_handled(lambda: None)
    assert events("record") == before[0] + 1
    assert events("record_gone", "error") == before[1] + 1
    assert events("other") == before[2] + 1


def test_a_reschedule_result_outside_the_set_is_refused():
    with pytest.raises(AssertionError):
        sm.rescheduled("maybe")


def test_the_controller_counts_a_move_and_a_failure():
    cluster = Cluster()
    before = actions("moved"), actions("failed")
    here, good, dead = cluster.host(), cluster.host(), cluster.host(alive=False)
    moved = cluster.failed_build(here, [good])
    stuck = cluster.failed_build(here, [dead])
    cluster.controller.on_record(here, moved["uuid"])
    cluster.controller.on_record(here, stuck["uuid"])
    assert actions("moved") == before[0] + 1
    assert actions("failed") == before[1] + 1
    # Handling the same records again (a sweep) does nothing more, and counts nothing.
    cluster.controller.on_record(here, moved["uuid"])
    cluster.controller.on_record(here, stuck["uuid"])
    assert (actions("moved"), actions("failed")) == (before[0] + 1, before[1] + 1)


def test_the_controller_counts_each_recovery_by_its_result():
    from tests.unit.controller.test_decisions import dead_host_cluster

    before = actions("error", "recover"), actions("rebuilt", "recover")
    cluster, clock, here, there, spec = dead_host_cluster(policy="error", place_on=None)
    clock.now += 10
    cluster.controller.recover_due()
    assert actions("error", "recover") == before[0] + 1
    assert actions("rebuilt", "recover") == before[1]


def test_the_controller_counts_a_move_that_lost_a_race():
    from etcd_compute.instances import host as host_txn

    cluster = Cluster()
    before = actions("conflict")
    here, good = cluster.host(), cluster.host()
    spec = cluster.failed_build(here, [good])
    stale = cluster.read(here, spec)
    # The record changes after the controller read it (a destroy's DELETING, say).
    host_txn.mark_deleting(cluster.store, spec, stale)
    assert cluster.controller.reschedule(here, spec["uuid"], stale) is None
    assert actions("conflict") == before + 1


def test_start_serves_nothing_without_an_address():
    assert sm.start(SCHEDULE_DEFAULTS, lambda: True) is None


def test_the_leader_gauge_follows_the_election_at_each_scrape():
    port = free_port()
    config = deep_merge(SCHEDULE_DEFAULTS, {"scheduler": {"metrics_listen": f"127.0.0.1:{port}"}})
    election = SimpleNamespace(is_leader=False)
    server = sm.start(config, lambda: election.is_leader)

    def scrape() -> str:
        return urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics",
                                      timeout=5).read().decode()

    try:
        assert "etcd_compute_controller_leader 0.0" in scrape()
        election.is_leader = True
        text = scrape()
        assert "etcd_compute_controller_leader 1.0" in text
        assert 'etcd_compute_controller_actions_total{action="reschedule",result="moved"}' in text
    finally:
        stop_server(server)


class Raising:
    """A handler named like the controller's, raising `exc`."""

    def __init__(self, exc: Exception):
        self.exc = exc

    def on_record(self, *_args: Any) -> None:
        raise self.exc


def test_the_service_counts_a_retry_and_an_unexpected_error():
    from etcd_compute import metrics

    service = ControllerService.__new__(ControllerService)
    service.events, service.clock = queue.Queue(), FakeClock()  # the retry never comes due
    before = (metrics.BACKEND_RETRIES.value("placement", "dispatch"), events("record", "error"),
              events("record"))
    service._dispatch(Raising(PlacementUnavailable("Placement at x is unreachable")).on_record, ())
    service._dispatch(Raising(KeyError("a bug")).on_record, ())
    assert metrics.BACKEND_RETRIES.value("placement", "dispatch") == before[0] + 1
    assert events("record", "error") == before[1] + 1
    assert events("record") == before[2]  # neither was handled

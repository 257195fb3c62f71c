"""The compute daemon's metrics: how a job's end is classified and counted (once), the watch
and request lag, instances by state, capacity, and serving them."""

from __future__ import annotations

import concurrent.futures
import concurrent.futures.process
import json
import threading
import time
import urllib.request
import uuid as uuidlib
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pebble
import pytest
from prometheus_client import REGISTRY

from etcd_compute.compute import metrics as cm
from etcd_compute.compute.identity import HostIdentity
from etcd_compute.compute.pool import BUILD, CHECK, CLEANUP, DESTROY, Job
from etcd_compute.config import deep_merge
from etcd_compute.defaults import COMPUTE_DEFAULTS
from etcd_compute.errors import BuildError, ConfigError, EtcdUnavailable, RequestError
from etcd_compute.instances import records, states
from tests.support import make_spec, stop_server
from tests.unit.compute.test_machine import Host
from tests.unit.fakes import FakePlacement, FakeStore
from tools.local_services import free_port


def sample(name: str, **labels: str) -> float:
    return REGISTRY.get_sample_value(name, labels) or 0.0


def builds(result: str) -> float:
    return sample("etcd_compute_builds_total", result=result)


def failures(kind: str, reason: str) -> float:
    return sample("etcd_compute_job_failures_total", kind=kind, reason=reason)


def job(kind: str = BUILD, *, result: Any = None, exc: BaseException | None = None,
        cancelled: bool = False, attempt: int = 1, started: float | None = None) -> Job:
    future: concurrent.futures.Future = concurrent.futures.Future()
    if cancelled:
        future.cancel()
    elif exc is not None:
        future.set_exception(exc)
    else:
        future.set_result(result)
    done = Job(kind, str(uuidlib.uuid4()), {}, future, attempt=attempt)
    if started is not None:
        done.started = started
    return done


# --- a job's end ----------------------------------------------------------------------------


@pytest.mark.parametrize(("exc", "reason"), [
    (concurrent.futures.TimeoutError(), "timeout"),
    (pebble.ProcessExpired("Abnormal termination", code=-9), "worker_died"),
    (concurrent.futures.process.BrokenProcessPool("gone"), "worker_died"),
    (RequestError("image file:///x not found"), "request"),
    (BuildError("libvirt: no room"), "driver"),
    (RuntimeError("a bug in a driver"), "driver"),
])
def test_a_failed_job_is_classified_by_a_small_fixed_set_of_reasons(exc, reason):
    result, found, again = cm.outcome(job(exc=exc, attempt=2))
    assert (result, found, again) == ("failure", reason, False)
    assert found in cm.REASONS


def test_success_cancelled_and_the_run_again_of_a_broken_pool():
    assert cm.outcome(job(result={"ip": "x"})) == ("success", None, False)
    assert cm.outcome(job(cancelled=True)) == ("cancelled", None, False)
    broken = concurrent.futures.process.BrokenProcessPool("gone")
    # First attempt: the machine runs it again (as `_finish_job` decides); second: final.
    assert cm.outcome(job(exc=broken, attempt=1)) == ("failure", "worker_died", True)
    assert cm.outcome(job(exc=broken, attempt=2)) == ("failure", "worker_died", False)


def test_a_build_is_counted_once_even_when_its_end_is_handled_again():
    before = builds("success"), sample("etcd_compute_build_duration_seconds_count",
                                       result="success")
    done = job(result={"ip": "x"}, started=time.monotonic() - 2.0)
    cm.job_finished(done)
    cm.job_finished(done)  # etcd failed half way: the main loop handles it again
    assert builds("success") == before[0] + 1
    assert sample("etcd_compute_build_duration_seconds_count", result="success") == \
        before[1] + 1
    # It took about 2 s: in the 2.5 s bucket, not in the 1 s one.
    assert sample("etcd_compute_build_duration_seconds_bucket", result="success", le="2.5") \
        - sample("etcd_compute_build_duration_seconds_bucket", result="success", le="1.0") >= 1


def test_a_failed_build_counts_its_reason_its_result_and_its_duration():
    before = (failures(BUILD, "timeout"), builds("failure"),
              sample("etcd_compute_build_duration_seconds_count", result="failure"))
    cm.job_finished(job(exc=concurrent.futures.TimeoutError()))
    assert failures(BUILD, "timeout") == before[0] + 1
    assert builds("failure") == before[1] + 1
    assert sample("etcd_compute_build_duration_seconds_count", result="failure") == before[2] + 1


def test_a_build_run_again_counts_the_dead_worker_but_not_a_build():
    before = failures(BUILD, "worker_died"), sum(builds(r) for r in cm.RESULTS)
    cm.job_finished(job(exc=concurrent.futures.process.BrokenProcessPool("gone")))
    assert failures(BUILD, "worker_died") == before[0] + 1
    assert sum(builds(r) for r in cm.RESULTS) == before[1]


def test_a_cancelled_build_is_counted_without_a_duration():
    before = builds("cancelled"), sample("etcd_compute_build_duration_seconds_count",
                                         result="success")
    cm.job_finished(job(cancelled=True))
    assert builds("cancelled") == before[0] + 1
    assert sample("etcd_compute_build_duration_seconds_count", result="success") == before[1]


def test_destroys_and_cleanups_have_their_own_series():
    before = (sample("etcd_compute_destroy_duration_seconds_count", result="failure"),
              failures(DESTROY, "driver"), failures(CLEANUP, "timeout"),
              sum(builds(r) for r in cm.RESULTS))
    cm.job_finished(job(DESTROY, exc=BuildError("could not undefine")))
    cm.job_finished(job(CLEANUP, exc=concurrent.futures.TimeoutError()))
    assert sample("etcd_compute_destroy_duration_seconds_count", result="failure") == \
        before[0] + 1
    assert failures(DESTROY, "driver") == before[1] + 1
    assert failures(CLEANUP, "timeout") == before[2] + 1
    assert sum(builds(r) for r in cm.RESULTS) == before[3]


def test_an_internal_error_is_a_failure_of_its_own():
    before = failures(BUILD, "internal")
    cm.job_failed_internally(job())
    assert failures(BUILD, "internal") == before + 1


def test_every_series_of_the_fixed_label_sets_exists_from_the_start():
    for result in cm.RESULTS:
        assert REGISTRY.get_sample_value("etcd_compute_builds_total", {"result": result}) \
            is not None
    for kind in cm.KINDS:
        for reason in cm.REASONS:
            assert REGISTRY.get_sample_value("etcd_compute_job_failures_total",
                                             {"kind": kind, "reason": reason}) is not None
    for state in states.STATES:
        assert REGISTRY.get_sample_value("etcd_compute_instances", {"state": state}) is not None


# --- through the machine ----------------------------------------------------------------------


def test_the_machine_counts_each_build_and_its_failure_once(tmp_path):
    host = Host(tmp_path)
    before = builds("success"), builds("failure"), failures(BUILD, "request")
    good, bad = host.spec(), host.spec(image="file:///no/such/image")
    host.send(good)
    host.send(bad)
    assert cm.jobs_of_kind(host.machine.jobs, CHECK) == 2
    host.until_jobs(BUILD)
    assert cm.jobs_of_kind(host.machine.jobs, BUILD) == 2
    host.settle()
    assert host.record(good["uuid"])["state"] == "ACTIVE"
    assert host.record(bad["uuid"])["state"] == "ERROR"
    assert cm.jobs_of_kind(host.machine.jobs, BUILD) == 0
    assert builds("success") == before[0] + 1
    assert builds("failure") == before[1] + 1
    assert failures(BUILD, "request") == before[2] + 1


def test_jobs_of_kind_counts_the_machines_jobs_by_kind():
    jobs = {"a": job(BUILD), "b": job(DESTROY), "c": job(BUILD)}
    counts = {kind: cm.jobs_of_kind(jobs, kind) for kind in cm.KINDS}
    assert counts == {kind: {BUILD: 2, DESTROY: 1}.get(kind, 0) for kind in cm.KINDS}
    assert len(cm.KINDS) == 22  # build, destroy, cleanup, check, 13 actions, a move's five
    # steps


# --- the watch ------------------------------------------------------------------------------


def event(version: int = 1, **spec: Any) -> SimpleNamespace:
    return SimpleNamespace(version=version, value=json.dumps(spec).encode())


def test_watch_lag_runs_from_arrival_to_handling_and_is_observed_once():
    before = sample("etcd_compute_watch_lag_seconds_count")
    arrived = event()
    cm.event_arrived(arrived)
    arrived.__dict__["_arrived"] -= 0.3  # it waited 0.3 s in the queue
    cm.event_handled(arrived)
    cm.event_handled(arrived)  # handled again after a retry
    assert sample("etcd_compute_watch_lag_seconds_count") == before + 1
    assert sample("etcd_compute_watch_lag_seconds_bucket", le="0.25") < \
        sample("etcd_compute_watch_lag_seconds_bucket", le="0.5")
    # An event that never passed the watch thread (reconcile) is not observed.
    cm.event_handled(event())
    assert sample("etcd_compute_watch_lag_seconds_count") == before + 1


def test_request_lag_is_for_new_build_specs_only():
    now = 1_000_000.0
    assert cm.request_lag(event(action="build", requested_at=now - 2.5), now) == 2.5
    # The scheduler's clock ahead of ours: no negative lag.
    assert cm.request_lag(event(action="build", requested_at=now + 3), now) == 0.0
    assert cm.request_lag(event(version=2, action="build", requested_at=now - 1), now) is None
    assert cm.request_lag(event(action="destroy", requested_at=now - 1), now) is None
    assert cm.request_lag(event(action="build"), now) is None
    assert cm.request_lag(event(action="build", requested_at=True), now) is None
    assert cm.request_lag(SimpleNamespace(version=1, value=b"{not json"), now) is None
    assert cm.request_lag(SimpleNamespace(version=1, value=b"[1]"), now) is None


def test_request_lag_of_a_hostile_spec_is_none_never_an_exception():
    """A spec nested too deep once raised RecursionError out of json.loads in the daemon's
    main loop (messages.decode refuses it before parsing: the same guard here)."""
    now = 1_000_000.0
    deep = b"[" * 100_000 + b"]" * 100_000
    assert cm.request_lag(SimpleNamespace(version=1, value=deep), now) is None
    huge = b'{"action": "build", "requested_at": 1, "x": "' + b"a" * (2 << 20) + b'"}'
    assert cm.request_lag(SimpleNamespace(version=1, value=huge), now) is None


# --- instances and capacity -------------------------------------------------------------------


def put_record(store: FakeStore, host: str, state: str) -> None:
    spec = make_spec(host)
    record = records.new_record(spec, states.SCHEDULED)
    record["state"] = state
    store.put("instance_record", store.keys.record(host, spec["uuid"]), record)


def test_count_states_counts_only_the_given_hosts_records_and_skips_garbage():
    store, a, b, other = FakeStore("/t"), *(str(uuidlib.uuid4()) for _ in range(3))
    for host, state in [(a, "ACTIVE"), (a, "ACTIVE"), (a, "ERROR"), (b, "BUILDING"),
                        (other, "ACTIVE")]:
        put_record(store, host, state)
    store.put_raw(store.keys.record(a, str(uuidlib.uuid4())), "{garbage")
    assert cm.count_states(store, [a, b]) == {"ACTIVE": 2, "ERROR": 1, "BUILDING": 1}


def test_capacity_is_placements_capacity_less_usage_summed_over_hosts():
    inventories = {
        "a": {"VCPU": {"total": 8, "reserved": 0, "allocation_ratio": 4.0},
              "MEMORY_MB": {"total": 4096, "reserved": 1024, "allocation_ratio": 1.0}},
        "b": {"VCPU": {"total": 4, "reserved": 1, "allocation_ratio": 1.0}},
    }
    usages = {"a": {"VCPU": 5, "MEMORY_MB": 512}}
    assert cm.capacity(inventories, usages) == {"VCPU": (32 + 3, 32 + 3 - 5),
                                                "MEMORY_MB": (3072, 2560)}


class Service(SimpleNamespace):
    """What a ComputeService gives `start` and the refresher."""

    def refresher(self, placement: Any = None) -> cm.Refresher:
        return cm.Refresher(self.store, self.hosts, lambda: self.inventories,
                            placement or FakePlacement(),
                            self.config["compute"]["inventory_refresh_seconds"], self.stopping)

    def start(self) -> Any:
        return cm.start(self.config, self.jobs, self.refresher)


def service(tmp_path: Path, store: FakeStore, hosts: list[str],
            inventories: dict[str, Any] | None = None) -> Service:
    config = deep_merge(COMPUTE_DEFAULTS, {"compute": {"inventory_refresh_seconds": 60}})
    return Service(store=store, hosts={h: HostIdentity(h, h[:8]) for h in hosts},
                   inventories=inventories or {}, config=config, stopping=threading.Event(),
                   jobs={})


def test_the_refresher_counts_states_soon_after_a_change_and_reads_capacity(tmp_path):
    store, host = FakeStore("/t"), str(uuidlib.uuid4())
    placement = FakePlacement()
    placement.ensure_provider(host, "h")
    placement.set_inventory(host, {"VCPU": {"total": 4}})
    placement.claim("c1", {host: {"resources": {"VCPU": 3}}}, "p", "u")
    inventories = {host: {"VCPU": {"total": 4, "reserved": 0, "allocation_ratio": 1.0},
                          "GONE_CLASS": {"total": 1, "reserved": 0, "allocation_ratio": 1.0}}}
    refresher = service(tmp_path, store, [host], inventories).refresher(placement)
    put_record(store, host, "ACTIVE")
    refresher.tick(100.0)
    assert sample("etcd_compute_instances", state="ACTIVE") == 1
    assert sample("etcd_compute_capacity", resource_class="VCPU") == 4
    assert sample("etcd_compute_capacity_free", resource_class="VCPU") == 1
    assert sample("etcd_compute_capacity_free", resource_class="GONE_CLASS") == 1

    # A second record, nothing says it changed, not yet due: not counted.
    put_record(store, host, "ACTIVE")
    refresher.tick(101.5)
    assert sample("etcd_compute_instances", state="ACTIVE") == 1
    # A job ended here: counted at the next tick.
    cm.job_finished(job())
    refresher.tick(102.0)
    assert sample("etcd_compute_instances", state="ACTIVE") == 2
    # What others change is counted every INSTANCES_REFRESH_SECONDS.
    put_record(store, host, "ERROR")
    refresher.tick(102.0 + cm.INSTANCES_REFRESH_SECONDS)
    assert sample("etcd_compute_instances", state="ERROR") == 1
    assert sample("etcd_compute_instances", state="DELETED") == 0

    # Capacity again at the inventory refresh; a class no longer registered goes away.
    del inventories[host]["GONE_CLASS"]
    placement.delete_allocations("c1")
    refresher.tick(100.0 + 60)
    assert sample("etcd_compute_capacity_free", resource_class="VCPU") == 4
    assert REGISTRY.get_sample_value("etcd_compute_capacity_free",
                                     {"resource_class": "GONE_CLASS"}) is None


def test_the_refresher_survives_etcd_going_away(tmp_path):
    class DownStore(FakeStore):
        def get_prefix(self, prefix: str, keys_only: bool = False) -> Any:
            raise EtcdUnavailable("etcd at x is unreachable")

    refresher = service(tmp_path, DownStore("/t"), [str(uuidlib.uuid4())]).refresher()
    refresher.tick(100.0)  # no exception: logged, tried again later
    assert refresher.last_count == 100.0


# --- serving --------------------------------------------------------------------------------


def test_start_serves_nothing_without_an_address(tmp_path):
    assert service(tmp_path, FakeStore("/t"), [str(uuidlib.uuid4())]).start() is None


def test_start_serves_jobs_in_flight_read_at_each_scrape(tmp_path):
    port = free_port()
    svc = service(tmp_path, FakeStore("/t"), [str(uuidlib.uuid4())])
    svc.config["compute"]["metrics_listen"] = f"127.0.0.1:{port}"
    svc.config["driver"]["name"] = "fake"
    server = svc.start()
    try:
        svc.jobs["x"] = job(DESTROY)

        def scrape() -> str:
            return urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics",
                                          timeout=5).read().decode()

        assert 'etcd_compute_jobs_in_flight{kind="destroy"} 1.0' in scrape()
        del svc.jobs["x"]
        text = scrape()
        assert 'etcd_compute_jobs_in_flight{kind="destroy"} 0.0' in text
        assert 'etcd_compute_backend_errors_total{service="etcd"}' in text
    finally:
        svc.stopping.set()
        stop_server(server)


def test_start_refuses_an_address_on_the_guests_bridge(tmp_path, monkeypatch):
    svc = service(tmp_path, FakeStore("/t"), [str(uuidlib.uuid4())])
    svc.config["compute"]["metrics_listen"] = "10.20.0.5:9180"
    svc.config["driver"]["libvirt"]["bridge"] = "br-guests"
    monkeypatch.setattr(cm, "bridge_addresses",
                        lambda bridge: {"10.20.0.5"} if bridge == "br-guests" else set())
    with pytest.raises(ConfigError, match="an address of driver.libvirt.bridge br-guests"):
        svc.start()


def test_bridge_addresses_reads_the_interfaces_addresses():
    assert "127.0.0.1" in cm.bridge_addresses("lo")
    assert cm.bridge_addresses(None) == set()
    assert cm.bridge_addresses("no-such-interface0") == set()


def test_a_job_that_goes_on_from_a_counted_one_is_not_counted_again():
    before = builds("success")
    waiting = job(result={"ip": "x", "ports": ["p"]})  # a build's wait for its ports
    cm.counted_already(waiting)
    cm.job_finished(waiting)
    assert builds("success") == before

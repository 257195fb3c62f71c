"""The compute side of an instance's life, against in-memory etcd, Placement and pool.

Each test drives `InstanceMachine` the way the daemon's main loop does (spec
events in, pool jobs run, follow-up events drained) and checks the end state
in the store, in Placement and in the (real, file-backed) fake driver.
"""

from __future__ import annotations

import concurrent.futures
import json
import threading
import uuid as uuidlib
from pathlib import Path
from typing import Any

import pebble
import pytest

from etcd_compute import messages
from etcd_compute.compute import worker
from etcd_compute.compute.consoles import Consoles
from etcd_compute.compute.identity import HostIdentity
from etcd_compute.compute.machine import InstanceMachine
from etcd_compute.compute.pool import BUILD, CLEANUP
from etcd_compute.config import COMPUTE_DEFAULTS, deep_merge
from etcd_compute.instances import actions as action_txn
from etcd_compute.instances import records, scheduling
from tests.support import make_spec
from tests.unit.fakes import EventLoop, FakePlacement, FakePool, FakeStore

INVENTORY = {"VCPU": {"total": 8}, "MEMORY_MB": {"total": 4096}, "DISK_GB": {"total": 100}}


class Host:
    """One compute host's machine, its fakes, and steps that read like the scenario."""

    def __init__(self, tmp_path: Path, **driver: Any):
        self.rp = str(uuidlib.uuid4())
        self.config = deep_merge(COMPUTE_DEFAULTS, {
            "compute": {"uuid": self.rp, "name": "host-a", "state_dir": str(tmp_path),
                        "instances_dir": str(tmp_path / "instances"),
                        "deleted_record_ttl": 60, "job_timeout_seconds": 30},
            "driver": {"name": "fake", "fake": driver},
        })
        worker.init_worker(self.config)  # the pool runs jobs in-process, on the fake driver
        self.store, self.placement = FakeStore("/t"), FakePlacement()
        self.pool, self.loop = FakePool(), EventLoop()
        self.placement.ensure_provider(self.rp, "host-a")
        self.placement.set_inventory(self.rp, INVENTORY)
        self.consoles = Consoles(self.store, self.pool, self.loop.post)
        self.stopping = threading.Event()
        # Delayed calls (a claim looked at again later), run when a test says so.
        self.delayed: list[tuple[float, Any, tuple[Any, ...]]] = []
        self.machine = InstanceMachine(self.store, self.placement, self.pool, self.consoles,
                                       {self.rp: HostIdentity(self.rp, "host-a")},
                                       self.config["compute"], self.loop.post, self.stopping,
                                       later=lambda s, f, *a: self.delayed.append((s, f, a)))
        self.keys = self.store.keys

    def spec(self, **extra: Any) -> dict[str, Any]:
        return make_spec(self.rp, **extra)

    def send(self, spec: dict[str, Any], claim: bool = True) -> int:
        """What the scheduler does: claim, then spec + SCHEDULED record."""
        if claim:
            self.placement.claim(spec["uuid"], spec["allocations"], "p", "u")
        scheduling.schedule(self.store, [(spec, "host-a")])
        return self.deliver(spec["uuid"])

    def deliver(self, uuid: str, rp: str | None = None) -> int:
        """The watch delivers the current value of the spec key."""
        entry = self.store.get(self.keys.spec(rp or self.rp, uuid))
        assert entry is not None
        self.machine.on_spec(rp or self.rp, uuid, entry.value, entry.mod_revision)
        return entry.mod_revision

    def write_raw(self, uuid: str, value: str, rp: str | None = None) -> None:
        self.store.put_raw(self.keys.spec(rp or self.rp, uuid), value)
        self.deliver(uuid, rp)

    def destroy(self, spec: dict[str, Any]) -> None:
        entry = self.store.get(self.keys.spec(self.rp, spec["uuid"]))
        assert action_txn.request_destroy(self.store, entry, spec) is not None
        self.deliver(spec["uuid"])

    def settle(self) -> None:
        self.loop.drain(self.pool)

    def record(self, uuid: str) -> dict[str, Any] | None:
        return records.read_record(self.store, self.rp, uuid).record

    def driver_holds(self) -> set[str]:
        return worker.list_instances()

    def keys_of(self, uuid: str) -> list[str]:
        entries, _ = self.store.get_prefix("/t/")
        return [e.key for e in entries if uuid in e.key]

    def failures(self) -> int:
        stats, _ = self.store.read(messages.HOST_STATS, self.keys.stats(self.rp))
        return len(stats["build_failures"]) if stats else 0


@pytest.fixture
def host(tmp_path: Path) -> Host:
    return Host(tmp_path)


def test_spec_builds_to_active_with_ip_booted_key_and_console(host):
    spec = host.spec()
    host.send(spec)
    assert host.record(spec["uuid"])["state"] == "BUILDING"
    host.settle()
    record = host.record(spec["uuid"])
    assert record["state"] == "ACTIVE" and record["ip"].startswith("198.51.100.")
    assert host.store.get(host.keys.booted(host.rp, spec["uuid"])).value.decode() == record["ip"]
    console, _ = host.store.read(messages.CONSOLE, host.keys.console(host.rp, spec["uuid"]))
    assert console["text"] == f"fake console of {spec['uuid']}: booted\n"
    assert host.driver_holds() == {spec["uuid"]}


def test_a_redelivered_spec_changes_nothing(host):
    spec = host.spec()
    host.send(spec)
    host.deliver(spec["uuid"])  # while building: the job is in flight
    assert len(host.pool.pending) == 1
    host.settle()
    writes = len(host.store.committed)
    host.deliver(spec["uuid"])  # after ACTIVE: nothing to do
    host.settle()
    assert len(host.store.committed) == writes and not host.pool.pending


def test_a_stopping_daemon_starts_no_build(host):
    host.stopping.set()
    spec = host.spec()
    host.send(spec)
    assert host.record(spec["uuid"])["state"] == "SCHEDULED" and not host.pool.pending


def test_a_hosts_life_of_an_instance_writes_only_its_own_keys(host):
    # What etcd's per-host permissions allow it: /hosts/<rp>/ (and its /stats/<rp>).
    written: list[str] = []

    def on_the_host(uuid: str, fault: Exception | None = None) -> None:
        before = len(host.store.committed)
        host.deliver(uuid)
        if fault is not None:
            host.pool.fail_next(fault)
        host.settle()
        written.extend(op.key for txn in host.store.committed[before:] for op in txn.success)

    spec = host.spec(group={"name": "g", "policy": "affinity"})
    failed = host.spec()
    for each, fault in ((spec, None), (failed, concurrent.futures.TimeoutError())):
        host.placement.claim(each["uuid"], each["allocations"], "p", "u")
        scheduling.schedule(host.store, [(each, "host-a")])  # the scheduler's writes
        on_the_host(each["uuid"], fault)
    assert host.record(spec["uuid"])["state"] == "ACTIVE"
    assert host.record(failed["uuid"])["state"] == "ERROR"
    entry = host.store.get(host.keys.spec(host.rp, spec["uuid"]))
    action_txn.request_destroy(host.store, entry, spec)  # the operator's write
    on_the_host(spec["uuid"])
    assert host.record(spec["uuid"])["state"] == "DELETED"
    assert host.keys.record(host.rp, spec["uuid"]) in written
    assert host.keys.stats(host.rp) in written
    assert [k for k in written
            if not k.startswith(host.keys.host(host.rp)) and k != host.keys.stats(host.rp)] == []


def test_destroy_during_build_cancels_it_and_nothing_is_built(host):
    spec = host.spec()
    host.send(spec)
    build_job = host.machine.jobs[spec["uuid"]]
    host.destroy(spec)
    assert build_job.future.cancelled() and build_job.destroy_requested
    host.settle()
    assert host.record(spec["uuid"])["state"] == "DELETED"
    assert host.driver_holds() == set()
    assert host.placement.get_allocations(spec["uuid"])["allocations"] == {}


def test_destroy_of_a_deleted_instance_is_idempotent(host):
    spec = host.spec()
    host.send(spec)
    host.settle()
    host.destroy(spec)
    host.settle()
    host.store.put(messages.INSTANCE_SPEC, host.keys.spec(host.rp, spec["uuid"]),
                   {**spec, "action": "destroy"})
    host.deliver(spec["uuid"])
    host.settle()
    assert host.record(spec["uuid"])["state"] == "DELETED"
    assert host.store.get(host.keys.spec(host.rp, spec["uuid"])) is None


@pytest.mark.parametrize(("raw", "fault"), [
    ("{not json", "not valid JSON"),
    (json.dumps({"action": "build"}), "required property"),
])
def test_garbage_spec_is_error_with_the_reason_and_the_claim_freed(host, raw, fault):
    uuid = str(uuidlib.uuid4())
    host.placement.claim(uuid, {host.rp: {"resources": {"VCPU": 1}}}, "p", "u")
    host.write_raw(uuid, raw)
    record = host.record(uuid)
    assert record["state"] == "ERROR" and fault in record["error"]
    assert host.store.get(host.keys.spec(host.rp, uuid)) is None
    assert host.placement.get_allocations(uuid)["allocations"] == {}
    assert host.failures() == 0  # the request was at fault, not the host


def test_a_spec_naming_another_uuid_or_host_is_refused(host):
    spec = host.spec()
    other = str(uuidlib.uuid4())
    host.write_raw(other, json.dumps(spec))
    assert "do not match key" in host.record(other)["error"]


def test_garbage_over_an_active_instance_tears_it_down(host):
    spec = host.spec()
    host.send(spec)
    host.settle()
    host.write_raw(spec["uuid"], "{garbage")
    assert host.machine.jobs[spec["uuid"]].kind == CLEANUP
    host.settle()
    record = host.record(spec["uuid"])
    assert record["state"] == "ERROR" and "not valid JSON" in record["error"]
    assert host.driver_holds() == set() and host.failures() == 0


def test_a_key_that_is_not_an_instance_is_dropped_without_a_record(host):
    host.write_raw("not-a-uuid", "{}")
    assert host.store.get(host.keys.spec(host.rp, "not-a-uuid")) is None
    assert host.store.get_prefix(host.keys.records(host.rp))[0] == []


def test_an_unreadable_record_is_rewritten_by_the_build(host, caplog):
    spec = host.spec()
    host.placement.claim(spec["uuid"], spec["allocations"], "p", "u")
    host.store.put(messages.INSTANCE_SPEC, host.keys.spec(host.rp, spec["uuid"]), spec)
    host.store.put_raw(host.keys.record(host.rp, spec["uuid"]), "{broken")
    host.deliver(spec["uuid"])
    host.settle()
    assert host.record(spec["uuid"])["state"] == "ACTIVE"
    assert "status record unreadable" in caplog.text


def test_a_build_interrupted_by_a_restart_is_resumed_without_a_new_write(host):
    spec = host.spec()
    host.send(spec)
    host.machine.jobs.clear()  # the daemon died; the record says BUILDING here
    host.pool.pending.clear()
    writes = len(host.store.committed)
    host.deliver(spec["uuid"])
    assert len(host.store.committed) == writes and host.machine.jobs[spec["uuid"]].kind == BUILD
    host.settle()
    assert host.record(spec["uuid"])["state"] == "ACTIVE"


def test_losing_the_race_to_a_destroy_rereads_the_spec(host):
    spec = host.spec()
    revision = host.send(spec, claim=True)
    host.settle()
    # A stale delivery of the build spec after the operator asked for a destroy.
    entry = host.store.get(host.keys.spec(host.rp, spec["uuid"]))
    action_txn.request_destroy(host.store, entry, spec)
    host.machine.on_spec(host.rp, spec["uuid"], entry.value, revision)
    host.settle()
    assert host.record(spec["uuid"])["state"] == "ACTIVE"  # the old event changed nothing
    host.deliver(spec["uuid"])
    host.settle()
    assert host.record(spec["uuid"])["state"] == "DELETED"


def test_a_job_cut_by_a_broken_pool_runs_once_more(host):
    spec = host.spec()
    host.send(spec)
    host.pool.is_healthy = False
    host.pool.fail_next(concurrent.futures.process.BrokenProcessPool("workers died"))
    host.loop.drain()  # the failed job's event: resubmitted, pool replaced
    assert host.pool.replaced == ["all workers died"]
    assert host.machine.jobs[spec["uuid"]].attempt == 2
    host.settle()
    assert host.record(spec["uuid"])["state"] == "ACTIVE"


@pytest.mark.parametrize(("exc", "reason"), [
    (concurrent.futures.TimeoutError(), "build timed out after 30 s (worker killed)"),
    (pebble.ProcessExpired("died", code=-9), "build worker died (exit code -9)"),
])
def test_a_build_that_times_out_or_whose_worker_dies_ends_in_error(host, exc, reason):
    spec = host.spec()
    host.send(spec)
    host.pool.fail_next(exc)
    host.settle()
    record = host.record(spec["uuid"])
    assert (record["state"], record["error"]) == ("ERROR", reason)


def test_a_failed_destroy_stays_deleting(host, caplog):
    spec = host.spec()
    host.send(spec)
    host.settle()
    host.destroy(spec)
    host.pool.fail_next(OSError("disk busy"))
    host.settle()
    assert host.record(spec["uuid"])["state"] == "DELETING"
    assert "destroy failed: OSError: disk busy" in caplog.text
    assert spec["uuid"] not in host.machine.jobs


def test_a_claim_moved_away_for_a_moment_is_waited_for_then_built(host):
    # The controller moved the claim to another host, then its etcd move failed (this host
    # came back) and it put the claim back: the spec must still be here to build.
    other = str(uuidlib.uuid4())
    host.placement.ensure_provider(other, "host-b")
    host.placement.set_inventory(other, INVENTORY)
    spec = host.spec()
    host.placement.claim(spec["uuid"], {other: {"resources": spec["resources"]}}, "p", "u")
    scheduling.schedule(host.store, [(spec, "host-a")])
    host.deliver(spec["uuid"])
    assert host.record(spec["uuid"])["state"] == "SCHEDULED"
    assert host.store.get(host.keys.spec(host.rp, spec["uuid"])) is not None
    [(seconds, again, args)] = host.delayed
    assert seconds > 0
    generation = host.placement.get_allocations(spec["uuid"])["consumer_generation"]
    host.placement.claim(spec["uuid"], spec["allocations"], "p", "u",
                         consumer_generation=generation)  # the undo
    again(*args)
    host.settle()
    assert host.record(spec["uuid"])["state"] == "ACTIVE"


def test_jobs_cut_by_a_fence_are_forgotten_so_the_reconcile_starts_them_again(host):
    spec = host.spec()
    host.send(spec)
    [job] = host.machine.jobs.values()
    host.machine.forget_jobs("cut by the fence")
    assert host.machine.jobs == {}
    # The worker's late word on the cut job changes nothing.
    host.machine.on_job_done(job)
    assert host.record(spec["uuid"])["state"] == "BUILDING"
    host.deliver(spec["uuid"])  # what the reconcile does: the build is resumed
    host.settle()
    assert host.record(spec["uuid"])["state"] == "ACTIVE"

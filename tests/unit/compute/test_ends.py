"""How a job's end is written (compute/ends.py), through the machine that routes it there:
built, failed (handed over or ERROR, counted against the host or not), destroyed."""

from __future__ import annotations

import uuid as uuidlib
from pathlib import Path

import pytest

from etcd_compute import messages
from etcd_compute.compute.ends import EVACUABLE
from etcd_compute.instances import host as host_txn
from tests.unit.compute.test_machine import INVENTORY, Host


@pytest.fixture
def host(tmp_path: Path) -> Host:
    return Host(tmp_path)


def test_destroy_frees_everything_and_leaves_an_expiring_deleted_record(host):
    spec = host.spec(group={"name": "g", "policy": "affinity"})
    host.send(spec)
    host.settle()
    host.destroy(spec)
    assert host.record(spec["uuid"])["state"] == "DELETING"
    host.settle()
    assert host.record(spec["uuid"])["state"] == "DELETED"
    # On the host only the record and its events are left, and they expire together; the
    # operator's keys stay until a reader forgets them (a host may not write them).
    assert host.keys_of(spec["uuid"]) == sorted([
        host.keys.record(host.rp, spec["uuid"]), host.keys.events(host.rp, spec["uuid"]),
        host.keys.location(spec["uuid"]), host.keys.group_member("g", spec["uuid"])])
    lease = host.store.get(host.keys.record(host.rp, spec["uuid"])).lease
    assert lease in host.store.leases
    assert host.store.get(host.keys.events(host.rp, spec["uuid"])).lease == lease
    assert host.placement.get_allocations(spec["uuid"])["allocations"] == {}
    assert host.driver_holds() == set()


def test_failed_build_ends_in_error_with_nothing_left_and_counts_against_the_host(tmp_path):
    host = Host(tmp_path, fail_builds=True)
    spec = host.spec()
    host.send(spec)
    host.settle()
    record = host.record(spec["uuid"])
    assert record["state"] == "ERROR" and "fake hypervisor is broken" in record["error"]
    assert host.keys_of(spec["uuid"]) == [host.keys.events(host.rp, spec["uuid"]),
                                          host.keys.record(host.rp, spec["uuid"]),
                                          host.keys.location(spec["uuid"])]
    assert host.placement.get_allocations(spec["uuid"])["allocations"] == {}
    assert host.failures() == 1


def add_alternate(host: Host, alive: bool = True, capacity: int = 8) -> str:
    other = str(uuidlib.uuid4())
    host.placement.ensure_provider(other, "host-b")
    host.placement.set_inventory(other, {**INVENTORY, "VCPU": {"total": capacity}})
    if alive:
        host.store.put(messages.ALIVE, host.keys.alive(other),
                       {"host": other, "name": "host-b", "since": 1.0})
    return other


def test_a_bad_image_is_error_at_once_and_not_counted_against_the_host(host):
    host.store.put(messages.CONTROLLER_LEADER, host.keys.leader(), {"name": "c", "since": 1.0})
    other = add_alternate(host)
    spec = host.spec(image="file:///nonexistent/image.qcow2")
    spec["alternates"] = [{"host": other, "allocations": {other: {"resources": spec["resources"]}}}]
    host.send(spec)
    host.settle()
    record = host.record(spec["uuid"])
    assert record["state"] == "ERROR" and "not found" in record["error"]  # not RESCHEDULING
    assert host.placement.get_allocations(spec["uuid"])["allocations"] == {}
    assert host.failures() == 0


def test_failed_build_with_alternates_is_handed_to_the_controller(tmp_path):
    host = Host(tmp_path, fail_builds=True)
    other = add_alternate(host)
    host.store.put(messages.CONTROLLER_LEADER, host.keys.leader(), {"name": "c", "since": 1.0})
    spec = host.spec()
    spec["alternates"] = [{"host": other, "allocations": {other: {"resources": spec["resources"]}}}]
    host.send(spec)
    by_the_host = len(host.store.committed)
    host.settle()
    record = host.record(spec["uuid"])
    assert (record["state"], record["error"]) == (
        "RESCHEDULING", "fake hypervisor is broken (driver.fake.fail_builds)")
    # Nothing moved yet: the claim and the spec wait for the controller; only our keys changed.
    assert set(host.placement.get_allocations(spec["uuid"])["allocations"]) == {host.rp}
    assert host.store.get(host.keys.spec(host.rp, spec["uuid"])) is not None
    assert host.driver_holds() == set() and host.failures() == 1
    written = {op.key for txn in host.store.committed[by_the_host:] for op in txn.success}
    assert all(k.startswith((host.keys.host(host.rp), host.keys.stats(host.rp))) for k in written)
    # A re-delivered spec does not build it again here.
    host.deliver(spec["uuid"])
    assert not host.pool.pending


def test_without_a_controller_a_failed_build_with_alternates_ends_in_error(tmp_path):
    host = Host(tmp_path, fail_builds=True)
    other = add_alternate(host)
    spec = host.spec()
    spec["alternates"] = [{"host": other, "allocations": {other: {"resources": spec["resources"]}}}]
    host.send(spec)
    host.settle()
    assert host.record(spec["uuid"])["state"] == "ERROR"
    assert host.placement.get_allocations(spec["uuid"])["allocations"] == {}


def test_a_build_that_ended_after_a_destroy_got_in_writes_nothing(host):
    spec = host.spec()
    host.send(spec)
    job = host.machine.jobs[spec["uuid"]]
    read = host.machine.read(host.rp, spec["uuid"])
    host_txn.mark_deleting(host.store, spec, read)  # a destroy, between the job and its end
    before = host.store.revision
    host.machine.ends.finish_build(job, {"ip": "10.0.0.9"})
    assert host.store.revision == before
    assert host.record(spec["uuid"])["state"] == "DELETING"


def test_an_evacuation_ends_only_what_a_drain_may_take(host):
    spec = host.spec()
    host.send(spec)
    host.settle()
    assert host.record(spec["uuid"])["state"] in EVACUABLE
    host.machine.ends.finish_evacuate(spec)
    record = host.record(spec["uuid"])
    assert record["state"] == "RESCHEDULING" and "(drain)" in record["error"]
    before = host.store.revision
    host.machine.ends.finish_evacuate(spec)  # RESCHEDULING now: nothing more to do
    assert host.store.revision == before

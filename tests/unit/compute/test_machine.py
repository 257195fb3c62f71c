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
from etcd_compute.compute import machine as machine_module
from etcd_compute.compute import worker
from etcd_compute.compute.checks import ClaimChecks
from etcd_compute.compute.consoles import Consoles
from etcd_compute.compute.identity import HostIdentity
from etcd_compute.compute.machine import InstanceMachine
from etcd_compute.compute.pool import BUILD, CHECK, CLEANUP
from etcd_compute.config import deep_merge
from etcd_compute.defaults import COMPUTE_DEFAULTS
from etcd_compute.drivers.fake import boot_log
from etcd_compute.errors import PlacementUnavailable
from etcd_compute.instances import actions as action_txn
from etcd_compute.instances import host as host_txn
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
                                       later=lambda s, f, *a: self.delayed.append((s, f, a)),
                                       # Claims checked as pool jobs: run when the test says.
                                       claim_checks=ClaimChecks(self.placement, self.pool))
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

    def until_jobs(self, kind: str) -> None:
        """Run events and pool jobs, one at a time, until every job in flight is a `kind`
        (a build: its claim checked and its image fetched)."""
        for _ in range(1000):
            if self.machine.jobs and all(j.kind == kind for j in self.machine.jobs.values()):
                return
            if self.loop.queue:
                handler, args = self.loop.queue.pop(0)
                handler(*args)
            else:
                assert self.pool.run_next(), f"no {kind} job came"
        raise AssertionError(f"no {kind} job came")

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
    assert console["text"] == boot_log(spec['uuid'])
    assert host.driver_holds() == {spec["uuid"]}


def test_a_redelivered_spec_changes_nothing(host):
    spec = host.spec()
    host.send(spec)
    pending = len(host.pool.pending)  # its claim check and its image fetch
    host.deliver(spec["uuid"])  # while checking: the job is in flight
    assert len(host.pool.pending) == pending
    host.until_jobs(BUILD)
    host.deliver(spec["uuid"])  # while building
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
            host.until_jobs(BUILD)
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
    host.until_jobs(BUILD)
    host.machine.jobs.clear()  # the daemon died; the record says BUILDING here
    host.pool.pending.clear()
    writes = len(host.store.committed)
    host.deliver(spec["uuid"])
    # Its claim is checked again before the build goes on.
    assert len(host.store.committed) == writes and host.machine.jobs[spec["uuid"]].kind == CHECK
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
    host.until_jobs(BUILD)
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
    host.settle()
    assert host.record(spec["uuid"])["state"] == "BUILDING" and host.driver_holds() == set()
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


# --- the claim, checked before anything of the guest is defined ------------------------------


def pending_work(host: Host) -> list[str]:
    """The names of the calls waiting in the pool (the claim checks run there too)."""
    return [function.__name__ for _future, function, _args in host.pool.pending]


def build_attempts(host: Host, uuid: str) -> list[str]:
    """The fake driver's builds.log lines of `uuid` (a line for every attempt)."""
    path = Path(host.config["compute"]["state_dir"]) / "fake-instances" / "builds.log"
    lines = path.read_text().splitlines() if path.exists() else []
    return [line.split()[1] for line in lines if line.startswith(uuid)]


def run_pending(host: Host, name: str) -> None:
    """Run the pending pool call named `name` (out of order)."""
    [index] = [i for i, item in enumerate(host.pool.pending) if item[1].__name__ == name]
    host.pool.pending.insert(0, host.pool.pending.pop(index))
    host.pool.run_next()


def other_host(host: Host) -> str:
    other = str(uuidlib.uuid4())
    host.placement.ensure_provider(other, "host-b")
    host.placement.set_inventory(other, INVENTORY)
    return other


def test_a_scheduled_spec_is_building_at_once_and_built_only_once_its_claim_holds(host):
    spec = host.spec()
    host.send(spec)
    # BUILDING at once (the notification), the claim checked beside the image fetch.
    assert host.record(spec["uuid"])["state"] == "BUILDING"
    assert sorted(pending_work(host)) == ["holding", "prefetch"]
    run_pending(host, "prefetch")
    host.loop.drain()
    assert "build" not in pending_work(host)  # the image is in; the claim not yet checked
    run_pending(host, "holding")
    host.loop.drain()
    assert pending_work(host) == ["build"]
    host.settle()
    assert host.record(spec["uuid"])["state"] == "ACTIVE"


def claim_here(host: Host, **resources: int) -> dict[str, Any]:
    return {host.rp: {"resources": resources}}


@pytest.mark.parametrize(("case", "error", "freed"), [
    ("none", "refused: Placement holds no claim for this instance", False),
    ("split", "refused: the claim is split between this host (VCPU:1) and ", False),
    ("covers", "refused: the spec asks for DISK_GB:1,MEMORY_MB:64,VCPU:1 but Placement holds "
               "DISK_GB:1,MEMORY_MB:64,VCPU:2 for it here", True),
    ("short", "refused: the spec asks for DISK_GB:1,MEMORY_MB:64,VCPU:1 but Placement holds "
              "VCPU:1 for it here", True),
])
def test_a_scheduled_spec_whose_claim_is_not_held_here_ends_in_error_never_built(
        host, case, error, freed):
    """Record and spec written as the scheduler writes them (a host's own certificate can),
    with no claim, a claim split with another host, or one with other amounts."""
    spec = host.spec()
    other = other_host(host)
    claim = {"none": None,
             "split": {host.rp: {"resources": {"VCPU": 1}},
                       other: {"resources": {"MEMORY_MB": 64, "DISK_GB": 1}}},
             "covers": claim_here(host, VCPU=2, MEMORY_MB=64, DISK_GB=1),
             "short": claim_here(host, VCPU=1)}[case]
    if claim is not None:
        host.placement.claim(spec["uuid"], claim, "p", "u")
    host.send(spec, claim=False)
    host.settle()
    record = host.record(spec["uuid"])
    assert record["state"] == "ERROR" and record["error"].startswith(error)
    assert build_attempts(host, spec["uuid"]) == [] and host.driver_holds() == set()
    assert host.store.get(host.keys.spec(host.rp, spec["uuid"])) is None
    held = host.placement.get_allocations(spec["uuid"])["allocations"]
    assert held == ({} if freed or claim is None else claim)  # a split one is not ours
    assert host.failures() == 0  # the request's fault, not the host's


def test_a_resumed_build_whose_claim_was_freed_meanwhile_ends_in_error_its_parts_removed(host):
    spec = host.spec()
    host.send(spec)
    host.until_jobs(BUILD)
    host.pool.run_next()  # the guest is built: then the daemon dies before recording it
    host.machine.jobs.clear()
    host.loop.queue.clear()
    assert host.driver_holds() == {spec["uuid"]}
    host.placement.delete_allocations(spec["uuid"])  # a destroy while the host was down
    host.deliver(spec["uuid"])  # the next start's reconcile: the record says BUILDING here
    host.settle()
    record = host.record(spec["uuid"])
    assert (record["state"], record["error"]) == (
        "ERROR", "refused: Placement holds no claim for this instance")
    assert host.driver_holds() == set()
    assert build_attempts(host, spec["uuid"]) == ["start", "built"]  # never again


def test_a_resumed_build_whose_claim_is_split_is_never_built(host):
    spec = host.spec()
    other = other_host(host)
    scheduling.schedule(host.store, [(spec, "host-a")])
    split = {host.rp: {"resources": {"VCPU": 1}},
             other: {"resources": {"MEMORY_MB": 64, "DISK_GB": 1}}}
    host.placement.claim(spec["uuid"], split, "p", "u")
    read = records.read_record(host.store, host.rp, spec["uuid"])
    entry = host.store.get(host.keys.spec(host.rp, spec["uuid"]))
    host_txn.begin_build(host.store, spec, entry.mod_revision, read, "host-a")  # then it died
    host.deliver(spec["uuid"])
    host.settle()
    assert "split between this host" in host.record(spec["uuid"])["error"]
    assert build_attempts(host, spec["uuid"]) == [] and host.driver_holds() == set()
    assert host.placement.get_allocations(spec["uuid"])["allocations"] == split


def test_a_claim_on_another_host_for_too_long_ends_in_error_and_stays_theirs(host, monkeypatch):
    monkeypatch.setattr(machine_module, "CLAIM_WAIT_SECONDS", 0.0)
    other = other_host(host)
    spec = host.spec()
    host.placement.claim(spec["uuid"], {other: {"resources": spec["resources"]}}, "p", "u")
    scheduling.schedule(host.store, [(spec, "host-a")])
    host.deliver(spec["uuid"])
    host.settle()
    assert host.record(spec["uuid"])["error"] == (
        f"refused: the instance is claimed on {other}, not on this host (for 0 s)")
    assert host.delayed == [] and host.driver_holds() == set()
    assert set(host.placement.get_allocations(spec["uuid"])["allocations"]) == {other}


def test_a_claim_check_placement_cannot_answer_is_tried_again_later(host):
    spec = host.spec()
    host.send(spec)
    broken = host.placement.get_allocations

    def unreachable(_consumer: str) -> dict[str, Any]:
        raise PlacementUnavailable("Placement at x is unreachable (ConnectionError)")

    host.placement.get_allocations = unreachable  # type: ignore[method-assign]
    host.settle()
    assert host.record(spec["uuid"])["state"] == "BUILDING" and host.driver_holds() == set()
    [(_seconds, again, args)] = host.delayed
    host.placement.get_allocations = broken  # type: ignore[method-assign]
    again(*args)
    host.settle()
    assert host.record(spec["uuid"])["state"] == "ACTIVE"


def test_a_destroy_while_the_claim_is_checked_builds_nothing(host):
    spec = host.spec()
    host.send(spec)
    assert host.machine.jobs[spec["uuid"]].kind == CHECK
    host.destroy(spec)
    host.settle()
    assert host.record(spec["uuid"])["state"] == "DELETED"
    assert build_attempts(host, spec["uuid"]) == [] and host.driver_holds() == set()
    assert host.placement.get_allocations(spec["uuid"])["allocations"] == {}


def test_garbage_over_an_instance_claimed_on_another_host_leaves_that_claim(host):
    # A host frees only a claim on it alone: never another host's, nor a split one.
    other = other_host(host)
    theirs, split = str(uuidlib.uuid4()), str(uuidlib.uuid4())
    host.placement.claim(theirs, {other: {"resources": {"VCPU": 1}}}, "p", "u")
    host.placement.claim(split, {host.rp: {"resources": {"VCPU": 1}},
                                 other: {"resources": {"MEMORY_MB": 64}}}, "p", "u")
    for uuid in (theirs, split):
        host.write_raw(uuid, "{garbage")
        assert host.record(uuid)["state"] == "ERROR"
    assert set(host.placement.get_allocations(theirs)["allocations"]) == {other}
    assert set(host.placement.get_allocations(split)["allocations"]) == {host.rp, other}


def test_a_forged_destroy_here_of_an_instance_claimed_elsewhere_leaves_its_claim(host):
    other = other_host(host)
    spec = host.spec()
    host.placement.claim(spec["uuid"], {other: {"resources": spec["resources"]}}, "p", "u")
    # A record and a destroy written here (a host's own certificate can).
    host.store.put(messages.INSTANCE_RECORD, host.keys.record(host.rp, spec["uuid"]),
                   records.new_record(spec, "SCHEDULED"))
    host.store.put(messages.INSTANCE_SPEC, host.keys.spec(host.rp, spec["uuid"]),
                   {**spec, "action": "destroy"})
    host.deliver(spec["uuid"])
    host.settle()
    assert host.record(spec["uuid"])["state"] == "DELETED"
    assert set(host.placement.get_allocations(spec["uuid"])["allocations"]) == {other}

def fence_on_the_next_write(host: Host) -> None:
    """The watchdog fences from its own thread, at any moment: here, just after the next
    etcd write (the one that moves the record to the job's state), before the job is
    submitted. Closing the gate is what `Fencer.fence` does."""
    commit = host.store.commit

    def commit_then_fence(txn: Any) -> int | None:
        host.store.commit = commit  # type: ignore[method-assign]
        revision = commit(txn)
        with host.machine.gate.lock:
            host.machine.gate.closed = True
        return revision

    host.store.commit = commit_then_fence  # type: ignore[method-assign]


def test_a_fence_between_the_builds_write_and_its_job_starts_no_job(host):
    spec = host.spec()
    host.placement.claim(spec["uuid"], spec["allocations"], "p", "u")
    scheduling.schedule(host.store, [(spec, "host-a")])
    fence_on_the_next_write(host)
    host.deliver(spec["uuid"])
    assert host.pool.pending == [] and host.machine.jobs == {}
    assert host.record(spec["uuid"])["state"] == "BUILDING"
    host.machine.gate.closed = False  # the fence lifted: the reconcile resumes the build
    host.deliver(spec["uuid"])
    host.settle()
    assert host.record(spec["uuid"])["state"] == "ACTIVE"
    builds = Path(host.config["compute"]["state_dir"]) / "fake-instances" / "builds.log"
    assert [line.split()[:2] for line in builds.read_text().splitlines()] == \
        [[spec["uuid"], "start"], [spec["uuid"], "built"]]  # once: nothing while fenced


def test_a_fence_between_an_actions_write_and_its_job_starts_no_job(host):
    spec = host.spec()
    host.send(spec)
    host.settle()
    entry = host.store.get(host.keys.spec(host.rp, spec["uuid"]))
    assert action_txn.request_action(host.store, entry, spec, records.read_record(
        host.store, host.rp, spec["uuid"]), "stop", action_txn.new_request("ann")) is not None
    fence_on_the_next_write(host)
    host.deliver(spec["uuid"])
    assert host.pool.pending == [] and host.machine.jobs == {}
    assert host.record(spec["uuid"])["state"] == "STOPPING"
    assert worker.running() == {spec["uuid"]}  # the fence powers it off, not a stop job

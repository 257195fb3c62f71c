"""The host's own account of its capacity (compute/capacity.py): what its specs claim, as of
which revision, published once per burst in its /stats/<rp> without erasing the build
failures written there meanwhile."""

from __future__ import annotations

import json
import uuid as uuidlib
from typing import Any

import pytest

from etcd_compute import hosts, messages
from etcd_compute.compute.capacity import CHUNK, CapacityAccount
from etcd_compute.errors import EtcdUnavailable
from tests.support import make_spec
from tests.unit.fakes import FakeStore

INVENTORY = {rc: {"total": total, "reserved": reserved, "allocation_ratio": ratio,
                  "min_unit": 1, "max_unit": total, "step_size": 1}
             for rc, total, reserved, ratio in (("VCPU", 4, 0, 4.0),
                                                ("MEMORY_MB", 4096, 512, 1.0),
                                                ("DISK_GB", 100, 1, 1.0))}


class Account:
    """A CapacityAccount over a FakeStore, its posted flushes run when the test says."""

    def __init__(self, count: int = 1):
        self.store = FakeStore("/t")
        self.hosts = [str(uuidlib.uuid4()) for _ in range(count)]
        self.inventories = {rp: INVENTORY for rp in self.hosts}
        self.posted: list[Any] = []
        self.account = CapacityAccount(self.store, self.hosts, lambda: self.inventories,
                                       lambda: {"HW_ARCH_X86_64", "CUSTOM_HYPERVISOR_FAKE"},
                                       lambda handler, args: self.posted.append(handler))

    def run_posted(self) -> int:
        ran = len(self.posted)
        for handler in self.posted[:]:
            self.posted.remove(handler)
            handler()
        return ran

    def spec(self, rp: str, **resources: int) -> tuple[str, bytes]:
        spec = make_spec(rp)
        if resources:  # as the scheduler writes it: its claim, on its host alone
            spec.update(resources=resources, allocations={rp: {"resources": resources}})
        return spec["uuid"], messages.encode(messages.INSTANCE_SPEC, spec).encode()

    def published(self, rp: str) -> dict[str, Any]:
        stats, _ = hosts.read_stats(self.store, rp)
        assert stats is not None
        return stats


def test_what_the_specs_claim_is_published_once_per_burst_as_of_the_last_revision():
    a = Account()
    rp = a.hosts[0]
    first, raw = a.spec(rp)
    a.account.spec(rp, first, raw, 10)
    second, raw = a.spec(rp, VCPU=2, MEMORY_MB=1024, DISK_GB=5)
    a.account.spec(rp, second, raw, 11)
    assert len(a.posted) == 1  # one flush for the burst
    assert a.store.get(a.store.keys.stats(rp)) is None  # nothing written before it runs
    a.run_posted()
    capacity = a.published(rp)["capacity"]
    assert capacity == {"inventory": INVENTORY, "used": {"VCPU": 3, "MEMORY_MB": 64 + 1024,
                                                         "DISK_GB": 6},
                        "instances": 2, "traits": ["CUSTOM_HYPERVISOR_FAKE", "HW_ARCH_X86_64"],
                        "as_of": 11}
    a.account.spec(rp, first, None, 12)  # its spec deleted: destroyed, or moved away
    a.run_posted()
    assert a.published(rp)["capacity"]["used"] == {"VCPU": 2, "MEMORY_MB": 1024, "DISK_GB": 5}
    assert a.published(rp)["capacity"]["as_of"] == 12


def test_a_spec_written_again_with_the_same_claim_publishes_nothing_new():
    a = Account()
    rp = a.hosts[0]
    uuid, raw = a.spec(rp)
    a.account.spec(rp, uuid, raw, 5)
    a.run_posted()
    a.account.spec(rp, uuid, raw, 6)  # BUILDING, an action: the claim is the same
    assert a.posted == []
    a.account.seen(9)  # another key's event: the revision moves on, nothing is marked
    assert a.posted == [] and a.account.as_of == 9


def test_an_unreadable_spec_holds_nothing_and_another_hosts_spec_is_not_ours():
    a = Account()
    rp = a.hosts[0]
    uuid, raw = a.spec(rp)
    a.account.spec(rp, uuid, raw, 3)
    a.account.spec(rp, uuid, b'{"action": "build"', 4)  # rewritten unreadable
    a.account.spec(str(uuidlib.uuid4()), uuid, raw, 5)
    a.run_posted()
    assert a.published(rp)["capacity"]["used"] == {}
    assert a.published(rp)["capacity"]["instances"] == 0


def test_a_spec_holds_what_its_claim_is_judged_on_whatever_else_it_carries():
    """Its resources, on the host it names (what the claim check judges before a guest is
    defined): `allocations` is optional, and reading it once raised KeyError out of the
    watch event (the spec neither refused nor built) and out of every reconcile after."""
    a = Account()
    rp = a.hosts[0]
    bare = make_spec(rp, resources={"VCPU": 2, "MEMORY_MB": 128, "DISK_GB": 3})
    del bare["allocations"]
    a.account.spec(rp, bare["uuid"], messages.encode(messages.INSTANCE_SPEC, bare).encode(), 3)
    elsewhere = make_spec(str(uuidlib.uuid4()))  # under our key, naming another host
    raw = messages.encode(messages.INSTANCE_SPEC, elsewhere).encode()
    a.account.spec(rp, elsewhere["uuid"], raw, 4)
    a.account.reset({rp: {bare["uuid"]: messages.encode(messages.INSTANCE_SPEC, bare).encode(),
                          elsewhere["uuid"]: raw}}, 5)
    a.run_posted()
    assert a.published(rp)["capacity"]["used"] == {"VCPU": 2, "MEMORY_MB": 128, "DISK_GB": 3}
    assert a.published(rp)["capacity"]["instances"] == 1


def test_a_reconcile_replaces_the_whole_account_with_what_it_read():
    a = Account(2)
    one, two = a.hosts
    stale, raw = a.spec(one)
    a.account.spec(one, stale, raw, 3)
    kept, raw_kept = a.spec(two, VCPU=2, MEMORY_MB=256, DISK_GB=1)
    a.account.reset({two: {kept: raw_kept}}, 20)
    a.run_posted()
    assert a.published(one)["capacity"]["used"] == {}
    assert a.published(two)["capacity"]["used"] == {"VCPU": 2, "MEMORY_MB": 256, "DISK_GB": 1}
    assert a.published(two)["capacity"]["as_of"] == 20


def test_build_failures_written_meanwhile_are_kept_and_ours_keep_the_account():
    a = Account()
    rp = a.hosts[0]
    uuid, raw = a.spec(rp)
    a.account.spec(rp, uuid, raw, 3)
    a.run_posted()
    hosts.record_build_failure(a.store, rp)  # the compute's ends: keeps the account
    assert a.published(rp)["capacity"]["instances"] == 1
    failures = a.published(rp)["build_failures"]
    hosts.put_stats(a.store, rp, {"build_failures": [*failures, 1.0]})  # an operator
    assert a.published(rp)["capacity"]["instances"] == 1
    other, raw = a.spec(rp)
    a.account.spec(rp, other, raw, 30)
    a.run_posted()  # our compare fails: read again, written with theirs
    published = a.published(rp)
    assert published["build_failures"] == [*failures, 1.0]
    assert published["capacity"]["instances"] == 2


def test_unreadable_stats_are_replaced_by_the_account():
    a = Account()
    rp = a.hosts[0]
    a.store.put_raw(a.store.keys.stats(rp), json.dumps({"build_failures": "many"}))
    a.account.mark(rp)
    a.run_posted()
    assert a.published(rp)["capacity"]["used"] == {}


def test_no_account_before_an_inventory_was_registered():
    a = Account()
    rp = a.hosts[0]
    a.inventories = {}
    a.account.mark(rp)
    a.run_posted()
    assert a.store.get(a.store.keys.stats(rp)) is None


def test_many_hosts_are_published_in_transactions_of_a_chunk():
    a = Account(CHUNK + 5)
    before = len(a.store.committed)
    a.account.mark(*a.hosts)
    a.run_posted()
    assert len(a.store.committed) - before == 2
    assert all(a.published(rp)["capacity"]["instances"] == 0 for rp in a.hosts)


def test_a_flush_etcd_refused_forgets_nothing_marked():
    a = Account()
    rp = a.hosts[0]
    uuid, raw = a.spec(rp)
    a.account.spec(rp, uuid, raw, 3)
    commit = a.store.commit

    def down(_txn):
        raise EtcdUnavailable("etcd at 127.0.0.1:2379 is unreachable")

    a.store.commit = down  # type: ignore[method-assign]
    with pytest.raises(EtcdUnavailable):
        a.run_posted()  # (the main loop posts it again in a second)
    a.store.commit = commit  # type: ignore[method-assign]
    a.account.flush()
    assert a.published(rp)["capacity"]["instances"] == 1

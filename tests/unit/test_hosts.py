"""The hosts as the rest see them (hosts.py): heartbeats bound to a lease, stats with the
recent build failures, an operator's disable; unreadable messages count as none."""

from __future__ import annotations

import json
import time
import uuid as uuidlib

from etcd_compute import hosts, messages
from tests.unit.fakes import FakeStore

A, B = str(uuidlib.uuid4()), str(uuidlib.uuid4())


def test_a_host_is_alive_while_its_lease_lives():
    store = FakeStore("/p")
    lease = store.lease(10)
    hosts.beat(store, lease.id, A, "host-a", "fake")
    assert hosts.is_alive(store, A) and not hosts.is_alive(store, B)
    assert store.get(store.keys.alive(A)).lease == lease.id
    beat = hosts.heartbeat(store, A)
    messages.check(messages.ALIVE, beat)
    assert (beat["host"], beat["name"], beat["driver"]) == (A, "host-a", "fake")
    assert time.time() - beat["since"] < 5
    assert hosts.alive_hosts(store) == {A} and hosts.count_alive(store) == 1
    store.expire(lease.id)
    assert not hosts.is_alive(store, A) and hosts.heartbeat(store, A) is None
    assert hosts.alive_hosts(store) == set() and hosts.count_alive(store) == 0


def test_an_unreadable_heartbeat_is_none_but_its_key_still_says_alive():
    store = FakeStore()
    store.put_raw(store.keys.alive(A), "{broken")
    hosts.beat(store, store.grant(10), B, "host-b", "libvirt")
    assert hosts.heartbeat(store, A) is None
    assert hosts.decode_heartbeat(b"{broken") is None
    assert set(hosts.heartbeats(store)) == {B}  # readable ones only
    # The key exists: the host has not died (the controller does not recover it).
    assert hosts.is_alive(store, A) and hosts.alive_hosts(store) == {A, B}


def test_build_failures_are_recorded_in_the_hosts_stats_the_last_ones_kept():
    store = FakeStore()
    assert hosts.build_failures(store, A) == []
    for _ in range(hosts.FAILURES_KEPT + 3):
        hosts.record_build_failure(store, A)
    failures = hosts.build_failures(store, A)
    assert len(failures) == hosts.FAILURES_KEPT and failures == sorted(failures)
    stats = hosts.decode_stats(store.get(store.keys.stats(A)).value)
    assert stats["build_failures"] == failures and stats["updated_at"] >= failures[-1]
    assert hosts.build_failures(store, B) == []  # per host


def test_unreadable_stats_count_as_no_failures_and_are_replaced():
    store = FakeStore()
    store.put_raw(store.keys.stats(A), json.dumps({"build_failures": "many"}))
    assert hosts.build_failures(store, A) == []
    assert hosts.decode_stats(store.get(store.keys.stats(A)).value) is None
    hosts.record_build_failure(store, A)
    assert len(hosts.build_failures(store, A)) == 1


def test_put_stats_stamps_them_unless_told_when():
    store = FakeStore()
    hosts.put_stats(store, A, {"build_failures": [1.0]})
    assert time.time() - hosts.decode_stats(store.get(store.keys.stats(A)).value)[
        "updated_at"] < 5
    hosts.put_stats(store, A, {"build_failures": [], "updated_at": 42.0})
    assert hosts.decode_stats(store.get(store.keys.stats(A)).value)["updated_at"] == 42.0


def test_heartbeats_and_stats_are_read_in_one_request():
    store = FakeStore("/p")
    hosts.beat(store, store.grant(10), A, "host-a", "fake")
    hosts.record_build_failure(store, B)
    (alive, stats), _ = store.read_many(hosts.heartbeat_and_stats_ranges(store.keys))
    assert [hosts.host_of(e.key) for e in alive.entries] == [A]
    assert [hosts.host_of(e.key) for e in stats.entries] == [B]


def test_an_operators_disable_is_read_and_forgotten():
    store = FakeStore()
    assert hosts.maintenance(store, A) is None and not hosts.under_maintenance(store, A)
    reason = {"since": time.time(), "reason": "disk swap", "by": "ann", "draining": False}
    hosts.disable(store, A, reason)
    assert hosts.maintenance(store, A) == reason and hosts.under_maintenance(store, A)
    hosts.enable(store, A)
    assert hosts.maintenance(store, A) is None and not hosts.under_maintenance(store, A)


def test_an_unreadable_disable_still_disables():
    store = FakeStore()
    store.put_raw(store.keys.maintenance(A), "{broken")
    assert hosts.maintenance(store, A) is None  # nothing to show
    assert hosts.under_maintenance(store, A)  # but the host stays disabled


ACCOUNT = {"inventory": {"VCPU": {"total": 4, "reserved": 0, "allocation_ratio": 1.0,
                                  "min_unit": 1, "max_unit": 4, "step_size": 1}},
           "used": {"VCPU": 1}, "instances": 1, "traits": [], "as_of": 7}


def test_build_failures_written_keep_the_hosts_account_of_its_capacity():
    store = FakeStore()
    hosts.put_stats(store, A, {"capacity": ACCOUNT})
    hosts.record_build_failure(store, A)  # the compute
    hosts.put_stats(store, A, {"build_failures": [1.0]})  # an operator's update_resource_stats
    stats, revision = hosts.read_stats(store, A)
    assert hosts.capacity_of(stats) == ACCOUNT and stats["build_failures"] == [1.0]
    assert revision == store.get(store.keys.stats(A)).mod_revision
    assert hosts.read_stats(store, B) == (None, 0) and hosts.capacity_of(None) is None


def test_the_account_is_published_only_over_the_stats_it_was_made_from():
    store = FakeStore()
    assert store.commit(hosts.stats_put(store, A, {"capacity": ACCOUNT, "updated_at": 1.0},
                                        0)) is not None
    _, revision = hosts.read_stats(store, A)
    assert store.commit(hosts.stats_put(store, A, {"updated_at": 2.0}, 0)) is None
    hosts.record_build_failure(store, A)
    assert store.commit(hosts.stats_put(store, A, {"updated_at": 3.0}, revision)) is None


def test_what_a_scheduler_reads_to_plan_on_the_accounts_is_one_read():
    store = FakeStore("/p")
    ranges = hosts.view_ranges(store.keys)
    assert [r.key for r in ranges] == [store.keys.alive_prefix(), store.keys.stats_prefix(),
                                       store.keys.maintenance_prefix()]
    assert ranges[2].keys_only  # who is disabled; why is not needed to plan


def test_a_host_s_libvirt_address_outlives_its_heartbeat_and_its_failures_keep_it():
    store = FakeStore()
    lease = store.lease(10)
    hosts.beat(store, lease.id, A, "host-a", "libvirt")
    assert hosts.libvirt_address(store, A) is None
    hosts.publish_libvirt_address(store, A, "10.0.0.1")
    hosts.record_build_failure(store, A)
    assert hosts.libvirt_address(store, A) == "10.0.0.1"
    assert len(hosts.build_failures(store, A)) == 1
    store.expire(lease.id)
    assert hosts.libvirt_address(store, A) == "10.0.0.1"  # what a fence needs after death
    revision = store.get(store.keys.stats(A)).mod_revision
    hosts.publish_libvirt_address(store, A, "10.0.0.1")  # unchanged: not written again
    assert store.get(store.keys.stats(A)).mod_revision == revision
    hosts.publish_libvirt_address(store, A, None)
    assert hosts.libvirt_address(store, A) is None and len(hosts.build_failures(store, A)) == 1
    store.put_raw(store.keys.stats(B), "{broken")
    assert hosts.libvirt_address(store, B) is None


def test_alive_and_disabled_are_read_together():
    store = FakeStore()
    assert hosts.alive_and_disabled(store) == (set(), set())
    hosts.beat(store, store.grant(10), A, "host-a", "fake")
    store.put_raw(store.keys.maintenance(B), "{broken")  # unreadable: still disabled
    assert hosts.alive_and_disabled(store) == ({A}, {B})


def test_the_account_the_libvirt_address_and_build_failures_keep_each_other():
    store = FakeStore()
    hosts.put_stats(store, A, {"capacity": ACCOUNT})
    hosts.publish_libvirt_address(store, A, "10.0.0.5")
    hosts.record_build_failure(store, A)
    stats, _ = hosts.read_stats(store, A)
    assert hosts.capacity_of(stats) == ACCOUNT and hosts.libvirt_address(store, A) == "10.0.0.5"
    assert len(stats["build_failures"]) == 1


def test_the_machines_boot_time_from_the_kernel(tmp_path):
    stat = tmp_path / "stat"
    stat.write_text("cpu  1 2 3\nbtime 1700000000\nprocesses 5\n")
    assert hosts.boot_time(str(stat)) == 1700000000.0
    stat.write_text("cpu  1 2 3\n")
    assert hosts.boot_time(str(stat)) is None
    assert hosts.boot_time(str(tmp_path / "absent")) is None


def test_an_operators_stats_keep_what_the_host_published_of_itself():
    """update_resource_stats (put_stats) writes build failures: the host's capacity account
    and its libvirt address stay (the address was erased: no fence through libvirt then)."""
    store = FakeStore()
    hosts.put_stats(store, A, {"capacity": ACCOUNT})
    hosts.publish_libvirt_address(store, A, "10.0.0.5")
    hosts.put_stats(store, A, {"build_failures": [1.0]})
    stats, _ = hosts.read_stats(store, A)
    assert hosts.capacity_of(stats) == ACCOUNT and stats["build_failures"] == [1.0]
    assert hosts.libvirt_address(store, A) == "10.0.0.5"


def test_stats_written_between_a_read_and_a_write_are_kept(monkeypatch):
    """Each writer reads the stats, changes its part and writes them compared with what it
    read: another's write in between is read again, never overwritten."""
    store = FakeStore()
    hosts.put_stats(store, A, {"capacity": ACCOUNT})
    real, raced = hosts.read_stats, []

    def meanwhile(store_, rp):
        found = real(store_, rp)
        if not raced:  # the compute publishes its address between our read and write
            raced.append(1)
            current = dict(found[0])
            store.put(messages.HOST_STATS, store.keys.stats(A),
                      {**current, "libvirt_address": "10.0.0.9"})
        return found

    monkeypatch.setattr(hosts, "read_stats", meanwhile)
    hosts.record_build_failure(store, A)
    assert hosts.libvirt_address(store, A) == "10.0.0.9"
    assert len(hosts.build_failures(store, A)) == 1


def test_a_host_publishes_its_console_relay_and_takes_it_back():
    store = FakeStore()
    assert hosts.console_address(store, A) is None
    hosts.publish_console_address(store, A, "10.0.0.1:6081")
    hosts.publish_libvirt_address(store, A, "10.0.0.1")
    hosts.put_stats(store, A, {"build_failures": []})  # the scheduler's write keeps it
    assert hosts.console_address(store, A) == "10.0.0.1:6081"
    assert hosts.libvirt_address(store, A) == "10.0.0.1"
    hosts.publish_console_address(store, A, None)
    assert hosts.console_address(store, A) is None
    assert hosts.libvirt_address(store, A) == "10.0.0.1"

"""What a host writes: one transaction per transition, compared with what it read, only
its own keys, events bounded."""

from __future__ import annotations

import json
import uuid as uuidlib

import pytest

from etcd_compute import events
from etcd_compute.instances import actions as action_txn
from etcd_compute.instances import host as host_txn
from etcd_compute.instances import ownership, records
from tests.support import make_spec
from tests.unit.fakes import FakeStore
from tests.unit.instances.helpers import (
    RP,
    active_one,
    ask,
    build_one,
    keys_left,
    log_of,
    read,
    schedule_one,
    take_up,
)


def test_begin_build_compares_record_and_spec():
    store = FakeStore()
    spec = schedule_one(store)
    spec_entry = store.get(store.keys.spec(RP, spec["uuid"]))
    read = records.read_record(store, RP, spec["uuid"])
    stale = host_txn.begin_build(store, spec, spec_entry.mod_revision - 1, read, "h")
    assert stale is None
    assert host_txn.begin_build(store, spec, spec_entry.mod_revision, read, "h") is not None
    assert records.read_record(store, RP, spec["uuid"]).state == "BUILDING"
    # The same read again: the record moved since, so a second delivery changes nothing.
    assert host_txn.begin_build(store, spec, spec_entry.mod_revision, read, "h") is None


def test_activate_sets_ip_on_record_and_booted_key():
    store = FakeStore()
    spec = build_one(store)
    assert host_txn.activate(store, records.read_record(store, RP, spec["uuid"]), "10.0.0.5")
    record = records.read_record(store, RP, spec["uuid"]).record
    assert (record["state"], record["ip"]) == ("ACTIVE", "10.0.0.5")
    assert store.get(store.keys.booted(RP, spec["uuid"])).value == b"10.0.0.5"


def test_fail_drops_the_hosts_keys_but_the_record_and_leaves_the_operators():
    store = FakeStore()
    spec = schedule_one(store, group={"name": "g", "policy": "affinity"})
    store.put_raw(store.keys.console(RP, spec["uuid"]), "{}")
    store.put_raw(store.keys.booted(RP, spec["uuid"]), "10.0.0.9")
    host_txn.fail(store, spec, records.read_record(store, RP, spec["uuid"]), "disk full")
    record = records.read_record(store, RP, spec["uuid"]).record
    assert (record["state"], record["error"]) == ("ERROR", "disk full")
    # The host may not write the operator's keys: location and member stay (a host's
    # ERROR record still holds the instance, so nothing forgets them either).
    assert keys_left(store) == {store.keys.record(RP, spec["uuid"]),
                                store.keys.events(RP, spec["uuid"]),
                                store.keys.location(spec["uuid"]),
                                store.keys.group_member("g", spec["uuid"])}
    assert ownership.forget(store, spec["uuid"], RP, "g") is None
    assert records.locate(store, spec["uuid"])["host"] == RP
    assert events.read(store, RP, spec["uuid"])[-1]["error"] == "disk full"


def test_fail_without_a_record_writes_an_error_record():
    store = FakeStore()
    spec = make_spec(RP)
    host_txn.fail(store, spec, records.RecordRead(None, 0), "bad")
    assert records.read_record(store, RP, spec["uuid"]).record["error"] == "bad"


def test_delete_leaves_a_record_that_expires_and_the_operators_keys_until_forgotten():
    store = FakeStore()
    spec = schedule_one(store, group={"name": "g", "policy": "anti-affinity"})
    store.put_raw(store.keys.console(RP, spec["uuid"]), "{}")
    host_txn.delete(store, spec, records.read_record(store, RP, spec["uuid"]), ttl=60)
    entry = store.get(store.keys.record(RP, spec["uuid"]))
    assert store.leases[entry.lease] == 60
    assert json.loads(entry.value)["state"] == "DELETED"
    assert keys_left(store) == {store.keys.record(RP, spec["uuid"]),
                                store.keys.events(RP, spec["uuid"]),
                                store.keys.location(spec["uuid"]),
                                store.keys.group_member("g", spec["uuid"])}
    assert store.get(store.keys.events(RP, spec["uuid"])).lease == entry.lease
    assert ownership.forget(store, spec["uuid"], RP, "g") is None  # the record is still there
    store.expire(entry.lease)  # record and events go together
    assert ownership.forget(store, spec["uuid"], RP, "g") is not None
    assert keys_left(store) == set()


def test_a_hosts_transitions_write_only_its_own_keys():
    # What etcd's per-host prefix permission allows: everything under /hosts/<rp>/.
    store = FakeStore()
    spec = schedule_one(store, group={"name": "g", "policy": "affinity"})
    failed = schedule_one(store, group={"name": "g", "policy": "affinity"})
    rejected = str(uuidlib.uuid4())
    spec_revision = store.put_raw(store.keys.spec(RP, rejected), "{")
    by_host = len(store.committed)

    def read(uuid: str) -> records.RecordRead:
        return records.read_record(store, RP, uuid)

    entry = store.get(store.keys.spec(RP, spec["uuid"]))
    assert host_txn.begin_build(store, spec, entry.mod_revision, read(spec["uuid"]), "h")
    assert host_txn.activate(store, read(spec["uuid"]), "10.0.0.5")
    assert host_txn.mark_deleting(store, spec, read(spec["uuid"]))
    assert host_txn.delete(store, spec, read(spec["uuid"]), ttl=60)
    assert host_txn.fail(store, failed, read(failed["uuid"]), "x")
    assert host_txn.reject(store, RP, rejected, spec_revision, "x")
    written = [op.key for txn in store.committed[by_host:] for op in txn.success]
    assert len(store.committed) - by_host == 6 and written
    assert [k for k in written if not k.startswith(store.keys.host(RP))] == []


@pytest.mark.parametrize(("running", "crashed", "state", "action", "result"), [
    (False, False, "SHUTOFF", "power-off", "success"),
    (False, True, "SHUTOFF", "power-off", "error"),
])
def test_a_power_change_seen_by_the_hypervisor(running, crashed, state, action, result):
    store = FakeStore()
    spec = active_one(store)
    assert host_txn.power_changed(store, read(store, spec["uuid"]), running, "why", crashed)
    assert read(store, spec["uuid"]).state == state
    last = log_of(store, spec["uuid"])[-1]
    assert (last["action"], last["result"], last["by"]) == (action, result, "hypervisor")
    assert host_txn.power_changed(store, read(store, spec["uuid"]), True, "started")
    assert read(store, spec["uuid"]).state == "ACTIVE"
    assert log_of(store, spec["uuid"])[-1]["action"] == "power-on"


def test_a_destroy_during_an_action_cuts_it_short():
    store = FakeStore()
    spec = active_one(store)
    take_up(store, ask(store, spec, "rebuild"))
    destroy = {**spec, "action": "destroy", "request": action_txn.new_request("bob")}
    assert host_txn.mark_deleting(store, destroy, read(store, spec["uuid"]))
    record = read(store, spec["uuid"]).record
    assert record["state"] == "DELETING" and "task" not in record
    rebuild, destroying = log_of(store, spec["uuid"])[-2:]
    assert (rebuild["action"], rebuild["result"], rebuild["error"]) == (
        "rebuild", "error", "cancelled: destroy asked")
    assert (destroying["action"], destroying["result"], destroying["by"]) == (
        "destroy", "running", "bob")


def test_events_stay_bounded():
    store = FakeStore()
    spec = active_one(store)
    for _ in range(events.MAX_EVENTS + 10):
        assert host_txn.power_changed(store, read(store, spec["uuid"]),
                                       read(store, spec["uuid"]).state == "SHUTOFF", "flap")
    log = log_of(store, spec["uuid"])
    assert len(log) == events.MAX_EVENTS and log[0]["action"].startswith("power-")

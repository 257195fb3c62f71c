"""Records: built from a spec, moved as the table allows, read (absent, valid, unreadable),
located and found; the group members and instance counts the scheduler plans with."""

from __future__ import annotations

import json
import uuid as uuidlib

import pytest

from etcd_compute import messages
from etcd_compute.errors import InvalidMessage
from etcd_compute.instances import host as host_txn
from etcd_compute.instances import records, states
from tests.support import make_spec
from tests.unit.fakes import FakeStore
from tests.unit.instances.helpers import OTHER, RP, build_one, schedule_one


def test_moved_refuses_what_the_table_refuses():
    record = records.new_record(make_spec(RP), states.SCHEDULED, "h")
    with pytest.raises(states.InvalidTransition):
        records.moved(record, states.ACTIVE)
    building = records.moved(record, states.BUILDING, host_name="h2")
    assert building["state"] == "BUILDING" and building["host_name"] == "h2"
    assert building["updated_at"] >= record["updated_at"]


def test_new_record_is_a_valid_message_from_the_spec():
    spec = make_spec(RP, group={"name": "web", "policy": "affinity"})
    record = records.new_record(spec, states.SCHEDULED, "host-a")
    messages.check(messages.INSTANCE_RECORD, record)
    assert (record["host"], record["group"], record["image"]) == (RP, "web", "file:///dev/null")
    assert record["created_at"] == spec["requested_at"]


@pytest.mark.parametrize(("extra", "groups"), [
    ({}, ["default"]),  # on the network: in the default group from its build
    ({"network": False}, []),  # no network interface: in none
    ({"security_groups": []}, []),  # rebuilt elsewhere after it left default: still out
])
def test_a_new_record_takes_the_security_groups_of_its_spec(extra, groups):
    record = records.new_record(make_spec(RP, **extra), states.SCHEDULED, "host-a")
    messages.check(messages.INSTANCE_RECORD, record)
    assert record["security_groups"] == groups


@pytest.mark.parametrize("hostile", [["web"], ["default", "default"], "default", [7],
                                     ["default"] * 2000, None])
def test_a_spec_with_hostile_security_groups_is_unreadable(hostile):
    with pytest.raises(InvalidMessage):
        messages.check(messages.INSTANCE_SPEC, {**make_spec(RP), "security_groups": hostile})


def test_read_record_absent_valid_and_unreadable():
    store = FakeStore()
    uuid = str(uuidlib.uuid4())
    assert records.read_record(store, RP, uuid) == records.RecordRead(None, 0)
    revision = store.put_raw(store.keys.record(RP, uuid), "{broken")
    unreadable = records.read_record(store, RP, uuid)
    assert unreadable.record is None and unreadable.revision == revision
    assert "not valid JSON" in unreadable.fault
    record = records.new_record(make_spec(RP, uuid=uuid), states.SCHEDULED)
    store.put(messages.INSTANCE_RECORD, store.keys.record(RP, uuid), record)
    assert records.read_record(store, RP, uuid).state == "SCHEDULED"
    # A record is read on one host only: another host knows nothing of it.
    assert records.read_record(store, OTHER, uuid) == records.RecordRead(None, 0)


def test_read_spec_absent_valid_and_unreadable():
    store = FakeStore()
    uuid = str(uuidlib.uuid4())
    assert records.read_spec(store, RP, uuid) == (None, None)
    store.put_raw(store.keys.spec(RP, uuid), "{broken")
    entry, spec = records.read_spec(store, RP, uuid)
    assert entry is not None and entry.key == store.keys.spec(RP, uuid) and spec is None
    scheduled = schedule_one(store)
    entry, spec = records.read_spec(store, RP, scheduled["uuid"])
    assert spec is not None and spec["uuid"] == scheduled["uuid"]
    assert entry.mod_revision == store.get(store.keys.spec(RP, scheduled["uuid"])).mod_revision
    assert records.read_spec(store, OTHER, scheduled["uuid"]) == (None, None)


def test_a_spec_at_its_key_is_valid_and_names_that_instance_and_host():
    spec = make_spec(RP)
    del spec["allocations"]  # optional: a host judges a spec by its resources
    raw = messages.encode(messages.INSTANCE_SPEC, spec).encode()
    assert records.spec_at(RP, spec["uuid"], raw) == spec
    for host, uuid in ((OTHER, spec["uuid"]), (RP, str(uuidlib.uuid4()))):
        with pytest.raises(InvalidMessage, match="^instance_spec: uuid/host .* do not match "
                                                 f"key {host}/{uuid}$"):
            records.spec_at(host, uuid, raw)
    with pytest.raises(InvalidMessage):
        records.spec_at(RP, spec["uuid"], b"{broken")


def test_locate_and_find():
    store = FakeStore()
    unknown = str(uuidlib.uuid4())
    assert records.locate(store, unknown) is None
    assert records.find(store, unknown) == (None, records.RecordRead(None, 0))
    spec = schedule_one(store)
    assert records.locate(store, spec["uuid"])["host"] == RP
    host, read = records.find(store, spec["uuid"])
    assert (host, read.state) == (RP, "SCHEDULED")
    assert read.revision == store.get(store.keys.record(RP, spec["uuid"])).mod_revision
    # Located, but its host kept no record (it expired): the host, and an absent record.
    store.delete(store.keys.record(RP, spec["uuid"]))
    assert records.find(store, spec["uuid"]) == (RP, records.RecordRead(None, 0))


def test_an_unreadable_location_is_found_by_searching_the_hosts():
    store = FakeStore()
    spec = schedule_one(store)
    store.put_raw(store.keys.location(spec["uuid"]), "{broken")
    assert records.locate(store, spec["uuid"]) is None
    host, read = records.find(store, spec["uuid"])
    assert (host, read.state) == (RP, "SCHEDULED")
    assert records.find(store, str(uuidlib.uuid4())) == (None, records.RecordRead(None, 0))
    store.put_raw(store.keys.location(spec["uuid"]), json.dumps({"host": "not-a-uuid"}))
    assert records.locate(store, spec["uuid"]) is None


def test_a_search_never_takes_a_moves_arrival_for_the_instance():
    """Unlocated (a spec written straight to a host), moving: the destination's INCOMING
    record is no home of the instance, whichever host's keys sort first (a destroy sent
    there left the instance running on its source)."""
    for first, second in ((RP, OTHER), (OTHER, RP)):
        store = FakeStore()
        spec = make_spec(first)
        record = {**records.new_record(spec, states.SCHEDULED), "state": states.ACTIVE}
        store.put(messages.INSTANCE_RECORD, store.keys.record(first, spec["uuid"]), record)
        store.put(messages.INSTANCE_RECORD, store.keys.record(second, spec["uuid"]),
                  {**record, "state": states.INCOMING, "host": second})
        host, read = records.find(store, spec["uuid"])
        assert (host, read.state) == (first, states.ACTIVE)
        store.delete(store.keys.record(first, spec["uuid"]))  # an arrival alone: that, then
        assert records.find(store, spec["uuid"])[0] == second


def test_group_members_are_the_live_ones_at_the_revision_read():
    store = FakeStore()
    group = {"name": "g", "policy": "anti-affinity"}
    building = build_one(store, group=group)
    scheduled = schedule_one(store, group=group)
    members, revision = records.group_members(store, "g")
    assert members == {building["uuid"]: {"host": RP, "policy": "anti-affinity"},
                       scheduled["uuid"]: {"host": RP, "policy": "anti-affinity"}}
    assert revision == store.revision
    assert records.group_members(store, "other") == ({}, store.revision)


def test_group_members_that_ended_do_not_count():
    store = FakeStore()
    group = {"name": "g", "policy": "affinity"}
    live, failed, deleted = (schedule_one(store, group=group) for _ in range(3))
    host_txn.fail(store, failed, records.read_record(store, RP, failed["uuid"]), "x")
    host_txn.delete(store, deleted, records.read_record(store, RP, deleted["uuid"]), ttl=60)
    revision = store.revision
    members, _ = records.group_members(store, "g")
    assert set(members) == {live["uuid"]}
    # Their records are still there: nothing is forgotten (nothing written) yet.
    assert store.revision == revision
    assert store.get(store.keys.group_member("g", failed["uuid"])) is not None


def test_group_members_whose_record_is_gone_are_forgotten():
    store = FakeStore()
    group = {"name": "g", "policy": "affinity"}
    live, expired = schedule_one(store, group=group), schedule_one(store, group=group)
    host_txn.delete(store, expired, records.read_record(store, RP, expired["uuid"]), ttl=60)
    store.delete(store.keys.record(RP, expired["uuid"]))  # the DELETED record expired
    members, _ = records.group_members(store, "g")
    assert set(members) == {live["uuid"]}
    assert store.get(store.keys.group_member("g", expired["uuid"])) is None
    assert records.locate(store, expired["uuid"]) is None
    assert records.locate(store, live["uuid"]) is not None


def test_group_members_skip_unreadable_members_and_keep_unreadable_records():
    store = FakeStore()
    group = {"name": "g", "policy": "affinity"}
    garbled = schedule_one(store, group=group)
    store.put_raw(store.keys.record(RP, garbled["uuid"]), "{broken")
    store.put_raw(store.keys.group_member("g", str(uuidlib.uuid4())), "{broken")
    revision = store.revision
    members, _ = records.group_members(store, "g")
    # An unreadable record still holds the instance: it counts, and is not forgotten.
    assert set(members) == {garbled["uuid"]}
    assert store.revision == revision


def test_count_by_host_counts_specs_only():
    store = FakeStore()
    a = schedule_one(store)
    for _ in range(2):
        schedule_one(store)
    store.put_raw(store.keys.spec(OTHER, "x"), "{}")
    store.put_raw(store.keys.record(OTHER, "y"), "{}")  # a record alone is no instance here
    store.put_raw(store.keys.booted(RP, a["uuid"]), "10.0.0.1")
    store.put_raw(store.keys.console(RP, a["uuid"]), "{}")
    store.put_raw(store.keys.hosts() + "not-an-instance-key", "{}")
    store.put_raw(store.keys.host(RP) + "unknown/" + a["uuid"], "{}")
    assert records.count_by_host(store) == {RP: 3, OTHER: 1}
    assert records.count_by_host(FakeStore()) == {}

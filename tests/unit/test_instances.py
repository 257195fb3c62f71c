"""The instance model: transitions allowed and refused, records, keys owned, one transaction
per transition (against the in-memory store)."""

from __future__ import annotations

import json
import uuid as uuidlib

import pytest

from etcd_compute import instances, messages
from etcd_compute.etcd import Delete, Put
from tests.support import make_spec
from tests.unit.fakes import FakeStore

RP, OTHER = str(uuidlib.uuid4()), str(uuidlib.uuid4())

ALLOWED = [(None, s) for s in ("SCHEDULED", "BUILDING", "ERROR", "DELETING", "DELETED")] + [
    ("SCHEDULED", "BUILDING"), ("BUILDING", "ACTIVE"), ("BUILDING", "SCHEDULED"),
    ("BUILDING", "ERROR"), ("ACTIVE", "DELETING"), ("ACTIVE", "ERROR"), ("ERROR", "DELETING"),
    ("DELETING", "DELETED"), ("DELETED", "DELETED"),
]
REFUSED = [(None, "ACTIVE"), ("SCHEDULED", "ACTIVE"), ("SCHEDULED", "SCHEDULED"),
           ("ACTIVE", "BUILDING"), ("ACTIVE", "SCHEDULED"), ("ERROR", "ACTIVE"),
           ("DELETING", "ACTIVE"), ("DELETED", "BUILDING"), ("DELETED", "ERROR")]


@pytest.mark.parametrize(("current", "target"), ALLOWED)
def test_allowed_transitions(current, target):
    instances.check_transition(current, target)


@pytest.mark.parametrize(("current", "target"), REFUSED)
def test_refused_transitions_name_both_states(current, target):
    with pytest.raises(instances.InvalidTransition) as caught:
        instances.check_transition(current, target)
    assert target in str(caught.value) and (current or "no record") in str(caught.value)


def test_every_state_has_its_moves_listed():
    assert set(instances.TRANSITIONS) == {None, *instances.STATES}
    assert all(targets <= set(instances.STATES) for targets in instances.TRANSITIONS.values())


def test_moved_refuses_what_the_table_refuses():
    record = instances.new_record(make_spec(RP), instances.SCHEDULED, "h")
    with pytest.raises(instances.InvalidTransition):
        instances.moved(record, instances.ACTIVE)
    building = instances.moved(record, instances.BUILDING, host_name="h2")
    assert building["state"] == "BUILDING" and building["host_name"] == "h2"
    assert building["updated_at"] >= record["updated_at"]


def test_new_record_is_a_valid_message_from_the_spec():
    spec = make_spec(RP, group={"name": "web", "policy": "affinity"})
    record = instances.new_record(spec, instances.SCHEDULED, "host-a")
    messages.check(messages.INSTANCE_RECORD, record)
    assert (record["host"], record["group"], record["image"]) == (RP, "web", "file:///dev/null")
    assert record["created_at"] == spec["requested_at"]


def test_read_record_absent_valid_and_unreadable():
    store = FakeStore()
    uuid = str(uuidlib.uuid4())
    assert instances.read_record(store, uuid) == instances.RecordRead(None, 0)
    revision = store.put_raw(store.keys.instance(uuid), "{broken")
    unreadable = instances.read_record(store, uuid)
    assert unreadable.record is None and unreadable.revision == revision
    assert "not valid JSON" in unreadable.fault
    record = instances.new_record(make_spec(RP, uuid=uuid), instances.SCHEDULED)
    store.put(messages.INSTANCE_RECORD, store.keys.instance(uuid), record)
    assert instances.read_record(store, uuid).state == "SCHEDULED"


def test_owned_keys_list_every_key_but_the_record():
    keys = FakeStore("/p").keys
    owned = instances.owned_keys(keys, "u", RP, "g")
    assert owned == [f"/p/hosts/{RP}/u", "/p/booted/u", "/p/console/u", "/p/groups/g/u"]
    assert instances.owned_keys(keys, "u", None, None) == ["/p/booted/u", "/p/console/u"]


def schedule_one(store: FakeStore, **extra) -> dict:
    spec = make_spec(RP, **extra)
    assert instances.schedule(store, [(spec, "host-a")]) is not None
    return spec


def test_schedule_writes_spec_record_and_member_in_one_transaction():
    store = FakeStore()
    specs = [make_spec(RP, group={"name": "g", "policy": "anti-affinity"}) for _ in range(2)]
    revision = instances.schedule(store, [(s, "host-a") for s in specs])
    assert len(store.committed) == 1
    for spec in specs:
        for key in (store.keys.host_instance(RP, spec["uuid"]), store.keys.instance(spec["uuid"]),
                    store.keys.group_member("g", spec["uuid"])):
            assert store.get(key).mod_revision == revision
    assert instances.operations(2, grouped=True) == len(store.committed[0].success) == 6


def test_schedule_refuses_a_uuid_that_has_a_record():
    store = FakeStore()
    spec = schedule_one(store)
    assert instances.schedule(store, [(spec, "host-a")]) is None


def test_schedule_refuses_when_the_group_grew_since_it_was_read():
    store = FakeStore()
    _, read_at = store.get_prefix(store.keys.group("g"))
    schedule_one(store, group={"name": "g", "policy": "anti-affinity"})
    late = make_spec(RP, group={"name": "g", "policy": "anti-affinity"})
    assert instances.schedule(store, [(late, "h")], group=("g", read_at)) is None
    _, now = store.get_prefix(store.keys.group("g"))
    assert instances.schedule(store, [(late, "h")], group=("g", now)) is not None


def test_begin_build_compares_record_and_spec():
    store = FakeStore()
    spec = schedule_one(store)
    spec_entry = store.get(store.keys.host_instance(RP, spec["uuid"]))
    read = instances.read_record(store, spec["uuid"])
    stale = instances.begin_build(store, spec, spec_entry.mod_revision - 1, read, "h")
    assert stale is None
    assert instances.begin_build(store, spec, spec_entry.mod_revision, read, "h") is not None
    assert instances.read_record(store, spec["uuid"]).state == "BUILDING"
    # The same read again: the record moved since, so a second delivery changes nothing.
    assert instances.begin_build(store, spec, spec_entry.mod_revision, read, "h") is None


def test_activate_sets_ip_on_record_and_booted_key():
    store = FakeStore()
    spec = schedule_one(store)
    instances.begin_build(store, spec, store.get(store.keys.host_instance(RP, spec["uuid"]))
                          .mod_revision, instances.read_record(store, spec["uuid"]), "h")
    assert instances.activate(store, instances.read_record(store, spec["uuid"]), "10.0.0.5")
    record = instances.read_record(store, spec["uuid"]).record
    assert (record["state"], record["ip"]) == ("ACTIVE", "10.0.0.5")
    assert store.get(store.keys.booted(spec["uuid"])).value == b"10.0.0.5"


def test_fail_keeps_only_the_record():
    store = FakeStore()
    spec = schedule_one(store, group={"name": "g", "policy": "affinity"})
    store.put_raw(store.keys.console(spec["uuid"]), "{}")
    instances.fail(store, spec, instances.read_record(store, spec["uuid"]), "disk full")
    record = instances.read_record(store, spec["uuid"]).record
    assert (record["state"], record["error"]) == ("ERROR", "disk full")
    assert [e.key for e in store.get_prefix("")[0]] == [store.keys.instance(spec["uuid"])]


def test_fail_without_a_record_writes_an_error_record():
    store = FakeStore()
    spec = make_spec(RP)
    instances.fail(store, spec, instances.RecordRead(None, 0), "bad")
    assert instances.read_record(store, spec["uuid"]).record["error"] == "bad"


def test_delete_leaves_a_record_that_expires():
    store = FakeStore()
    spec = schedule_one(store)
    instances.delete(store, spec, instances.read_record(store, spec["uuid"]), ttl=60)
    entry = store.get(store.keys.instance(spec["uuid"]))
    assert store.leases[entry.lease] == 60
    assert json.loads(entry.value)["state"] == "DELETED"
    assert store.get(store.keys.host_instance(RP, spec["uuid"])) is None


def test_move_takes_spec_record_and_member_to_the_new_host_together():
    store = FakeStore()
    spec = schedule_one(store, group={"name": "g", "policy": "anti-affinity"})
    instances.begin_build(store, spec, store.get(store.keys.host_instance(RP, spec["uuid"]))
                          .mod_revision, instances.read_record(store, spec["uuid"]), "h")
    allocations = {OTHER: {"resources": spec["resources"]}}
    revision = instances.move(store, spec, instances.read_record(store, spec["uuid"]), OTHER,
                              allocations, [])
    assert store.get(store.keys.host_instance(RP, spec["uuid"])) is None
    moved_spec, _ = store.read(messages.INSTANCE_SPEC,
                               store.keys.host_instance(OTHER, spec["uuid"]))
    assert moved_spec["allocations"] == allocations
    record = instances.read_record(store, spec["uuid"])
    assert (record.state, record.record["host"], record.revision) == ("SCHEDULED", OTHER, revision)
    member, _ = store.read(messages.GROUP_MEMBER, store.keys.group_member("g", spec["uuid"]))
    assert member["host"] == OTHER


def test_request_destroy_only_over_the_spec_it_read():
    store = FakeStore()
    spec = schedule_one(store)
    entry = store.get(store.keys.host_instance(RP, spec["uuid"]))
    store.put_raw(entry.key, json.dumps(spec))  # someone wrote it again meanwhile
    assert instances.request_destroy(store, entry, spec) is None
    entry = store.get(entry.key)
    assert instances.request_destroy(store, entry, spec) is not None
    assert store.read(messages.INSTANCE_SPEC, entry.key)[0]["action"] == "destroy"


def test_remove_forgets_record_and_keys():
    store = FakeStore()
    spec = make_spec(RP, group={"name": "g", "policy": "affinity"})
    instances.fail(store, spec, instances.RecordRead(None, 0), "x")
    record = instances.read_record(store, spec["uuid"]).record
    record["group"] = "g"
    instances.remove(store, spec["uuid"], record)
    ops = store.committed[-1].success
    assert all(isinstance(op, Delete) for op in ops)
    assert store.get(store.keys.instance(spec["uuid"])) is None


def test_count_by_host_and_find_spec():
    store = FakeStore()
    a, b, c = (schedule_one(store) for _ in range(3))
    store.put_raw(store.keys.host_instance(OTHER, "x"), "{}")
    store.put_raw(store.keys.hosts() + "not-an-instance-key", "{}")
    assert instances.count_by_host(store) == {RP: 3, OTHER: 1}
    assert instances.find_spec(store, b["uuid"], None).key == store.keys.host_instance(
        RP, b["uuid"])
    assert instances.find_spec(store, "missing", None) is None


def test_every_transition_writes_valid_messages():
    store = FakeStore()
    schedule_one(store)
    for txn in store.committed:
        for op in txn.success:
            if isinstance(op, Put) and "/booted/" not in op.key:
                json.loads(op.value)

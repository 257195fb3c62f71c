"""The instance model: transitions allowed and refused, records, keys owned, one transaction
per transition (against the in-memory store)."""

from __future__ import annotations

import json
import uuid as uuidlib

import pytest

from etcd_compute import events, instances, messages
from etcd_compute.etcd import Delete, Put
from tests.support import make_spec
from tests.unit.fakes import FakeStore

RP, OTHER = str(uuidlib.uuid4()), str(uuidlib.uuid4())

ALLOWED = [(None, s) for s in ("SCHEDULED", "BUILDING", "ERROR", "DELETING", "DELETED")] + [
    ("SCHEDULED", "BUILDING"), ("BUILDING", "ACTIVE"), ("BUILDING", "RESCHEDULING"),
    ("BUILDING", "ERROR"), ("ACTIVE", "DELETING"), ("ACTIVE", "ERROR"), ("ERROR", "DELETING"),
    ("RESCHEDULING", "SCHEDULED"), ("RESCHEDULING", "ERROR"), ("RESCHEDULING", "DELETING"),
    # evacuated: its host died
    ("SCHEDULED", "SCHEDULED"), ("BUILDING", "SCHEDULED"), ("ACTIVE", "SCHEDULED"),
    ("DELETING", "DELETED"), ("DELETED", "DELETED"),
]
REFUSED = [(None, "ACTIVE"), ("SCHEDULED", "ACTIVE"), ("ERROR", "SCHEDULED"),
           ("ACTIVE", "BUILDING"), ("DELETING", "SCHEDULED"), ("ERROR", "ACTIVE"),
           ("DELETED", "SCHEDULED"), ("ERROR", "RESCHEDULING"), ("RESCHEDULING", "ACTIVE"),
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
    assert instances.read_record(store, RP, uuid) == instances.RecordRead(None, 0)
    revision = store.put_raw(store.keys.record(RP, uuid), "{broken")
    unreadable = instances.read_record(store, RP, uuid)
    assert unreadable.record is None and unreadable.revision == revision
    assert "not valid JSON" in unreadable.fault
    record = instances.new_record(make_spec(RP, uuid=uuid), instances.SCHEDULED)
    store.put(messages.INSTANCE_RECORD, store.keys.record(RP, uuid), record)
    assert instances.read_record(store, RP, uuid).state == "SCHEDULED"
    # A record is read on one host only: another host knows nothing of it.
    assert instances.read_record(store, OTHER, uuid) == instances.RecordRead(None, 0)


def test_host_keys_are_the_hosts_own_keys_but_the_record():
    keys = FakeStore("/p").keys
    assert instances.host_keys(keys, RP, "u") == [
        f"/p/hosts/{RP}/specs/u", f"/p/hosts/{RP}/booted/u", f"/p/hosts/{RP}/console/u"]
    assert all(k.startswith(keys.host(RP)) for k in instances.host_keys(keys, RP, "u"))
    assert keys.record(RP, "u") not in instances.host_keys(keys, RP, "u")


def test_operator_keys_are_the_location_the_api_view_and_the_group_member():
    keys = FakeStore("/p").keys
    assert instances.operator_keys(keys, "u", "g") == ["/p/instances/u", "/p/servers/u",
                                                       "/p/groups/g/u"]
    assert instances.operator_keys(keys, "u", None) == ["/p/instances/u", "/p/servers/u"]
    assert not any(k.startswith(keys.hosts()) for k in instances.operator_keys(keys, "u", "g"))


def schedule_one(store: FakeStore, **extra) -> dict:
    spec = make_spec(RP, **extra)
    assert instances.schedule(store, [(spec, "host-a")]) is not None
    return spec


def build_one(store: FakeStore, **extra) -> dict:
    """A scheduled instance its host started building."""
    spec = schedule_one(store, **extra)
    assert instances.begin_build(store, spec, store.get(store.keys.spec(RP, spec["uuid"]))
                                 .mod_revision, instances.read_record(store, RP, spec["uuid"]),
                                 "h") is not None
    return spec


def handed_over(store: FakeStore, **extra) -> dict:
    """An instance whose build failed on RP, handed to the controller (RESCHEDULING)."""
    spec = build_one(store, **extra)
    assert instances.hand_over(store, spec, instances.read_record(store, RP, spec["uuid"]),
                               "disk full") is not None
    return spec


def keys_left(store: FakeStore) -> set[str]:
    return {e.key for e in store.get_prefix("")[0]}


def test_schedule_writes_spec_record_location_and_member_in_one_transaction():
    store = FakeStore()
    specs = [make_spec(RP, group={"name": "g", "policy": "anti-affinity"}) for _ in range(2)]
    revision = instances.schedule(store, [(s, "host-a") for s in specs])
    assert len(store.committed) == 1
    for spec in specs:
        for key in (store.keys.spec(RP, spec["uuid"]), store.keys.record(RP, spec["uuid"]),
                    store.keys.location(spec["uuid"]),
                    store.keys.group_member("g", spec["uuid"])):
            assert store.get(key).mod_revision == revision
    assert instances.operations(2, grouped=True) == len(store.committed[0].success) == 8


def test_schedule_writes_where_the_instance_is_on_the_operators_side():
    store = FakeStore()
    grouped = schedule_one(store, group={"name": "web", "policy": "affinity"})
    location, _ = store.read(messages.INSTANCE_LOCATION, store.keys.location(grouped["uuid"]))
    assert location == {"host": RP, "group": "web", "created_at": grouped["requested_at"]}
    member, _ = store.read(messages.GROUP_MEMBER, store.keys.group_member("web", grouped["uuid"]))
    assert member == {"host": RP, "policy": "affinity"}
    alone = schedule_one(store)
    location, _ = store.read(messages.INSTANCE_LOCATION, store.keys.location(alone["uuid"]))
    assert location == {"host": RP, "group": None, "created_at": alone["requested_at"]}
    assert instances.operations(1, grouped=False) == len(store.committed[-1].success) == 3
    assert store.get_prefix(store.keys.groups())[0] == [
        store.get(store.keys.group_member("web", grouped["uuid"]))]


def test_schedule_refuses_a_uuid_that_is_located_anywhere():
    store = FakeStore()
    spec = schedule_one(store)
    assert instances.schedule(store, [(spec, "host-a")]) is None
    # Even on another host, whose keys know nothing of it: the location decides.
    assert instances.schedule(store, [({**spec, "host": OTHER}, "host-b")]) is None
    assert store.get(store.keys.spec(OTHER, spec["uuid"])) is None


def test_schedule_refuses_when_the_group_grew_since_it_was_read():
    store = FakeStore()
    _, read_at = store.get_prefix(store.keys.group("g"))
    schedule_one(store, group={"name": "g", "policy": "anti-affinity"})
    late = make_spec(RP, group={"name": "g", "policy": "anti-affinity"})
    assert instances.schedule(store, [(late, "h")], group=("g", read_at)) is None
    assert instances.locate(store, late["uuid"]) is None
    _, now = store.get_prefix(store.keys.group("g"))
    assert instances.schedule(store, [(late, "h")], group=("g", now)) is not None


def _as_read(store: FakeStore, spec: dict) -> tuple:
    uuid = spec["uuid"]
    return (RP, uuid, (spec.get("group") or {}).get("name"),
            store.get(store.keys.record(RP, uuid)).mod_revision,
            store.get(store.keys.spec(RP, uuid)).mod_revision)


def test_unschedule_takes_back_every_key_while_nobody_acted():
    store = FakeStore()
    specs = [schedule_one(store, group={"name": "g", "policy": "anti-affinity"}),
             schedule_one(store)]
    assert instances.unschedule(store, [_as_read(store, s) for s in specs]) is not None
    assert keys_left(store) == set()
    # Each: record, events, spec, booted, console, location, API view (and group member):
    # one transaction.
    assert len(store.committed[-1].success) == 8 + 7


def test_unschedule_refuses_once_a_host_began_the_build():
    store = FakeStore()
    taken, untouched = build_one(store), schedule_one(store)
    before = keys_left(store)
    read = (RP, taken["uuid"], None,
            store.get(store.keys.record(RP, taken["uuid"])).mod_revision - 1,
            store.get(store.keys.spec(RP, taken["uuid"])).mod_revision)
    assert instances.unschedule(store, [read, _as_read(store, untouched)]) is None
    assert keys_left(store) == before  # all or nothing


def test_begin_build_compares_record_and_spec():
    store = FakeStore()
    spec = schedule_one(store)
    spec_entry = store.get(store.keys.spec(RP, spec["uuid"]))
    read = instances.read_record(store, RP, spec["uuid"])
    stale = instances.begin_build(store, spec, spec_entry.mod_revision - 1, read, "h")
    assert stale is None
    assert instances.begin_build(store, spec, spec_entry.mod_revision, read, "h") is not None
    assert instances.read_record(store, RP, spec["uuid"]).state == "BUILDING"
    # The same read again: the record moved since, so a second delivery changes nothing.
    assert instances.begin_build(store, spec, spec_entry.mod_revision, read, "h") is None


def test_activate_sets_ip_on_record_and_booted_key():
    store = FakeStore()
    spec = build_one(store)
    assert instances.activate(store, instances.read_record(store, RP, spec["uuid"]), "10.0.0.5")
    record = instances.read_record(store, RP, spec["uuid"]).record
    assert (record["state"], record["ip"]) == ("ACTIVE", "10.0.0.5")
    assert store.get(store.keys.booted(RP, spec["uuid"])).value == b"10.0.0.5"


def test_fail_drops_the_hosts_keys_but_the_record_and_leaves_the_operators():
    store = FakeStore()
    spec = schedule_one(store, group={"name": "g", "policy": "affinity"})
    store.put_raw(store.keys.console(RP, spec["uuid"]), "{}")
    store.put_raw(store.keys.booted(RP, spec["uuid"]), "10.0.0.9")
    instances.fail(store, spec, instances.read_record(store, RP, spec["uuid"]), "disk full")
    record = instances.read_record(store, RP, spec["uuid"]).record
    assert (record["state"], record["error"]) == ("ERROR", "disk full")
    # The host may not write the operator's keys: location and member stay (a host's
    # ERROR record still holds the instance, so nothing forgets them either).
    assert keys_left(store) == {store.keys.record(RP, spec["uuid"]),
                                store.keys.events(RP, spec["uuid"]),
                                store.keys.location(spec["uuid"]),
                                store.keys.group_member("g", spec["uuid"])}
    assert instances.forget(store, spec["uuid"], RP, "g") is None
    assert instances.locate(store, spec["uuid"])["host"] == RP
    assert events.read(store, RP, spec["uuid"])[-1]["error"] == "disk full"


def test_fail_without_a_record_writes_an_error_record():
    store = FakeStore()
    spec = make_spec(RP)
    instances.fail(store, spec, instances.RecordRead(None, 0), "bad")
    assert instances.read_record(store, RP, spec["uuid"]).record["error"] == "bad"


def test_delete_leaves_a_record_that_expires_and_the_operators_keys_until_forgotten():
    store = FakeStore()
    spec = schedule_one(store, group={"name": "g", "policy": "anti-affinity"})
    store.put_raw(store.keys.console(RP, spec["uuid"]), "{}")
    instances.delete(store, spec, instances.read_record(store, RP, spec["uuid"]), ttl=60)
    entry = store.get(store.keys.record(RP, spec["uuid"]))
    assert store.leases[entry.lease] == 60
    assert json.loads(entry.value)["state"] == "DELETED"
    assert keys_left(store) == {store.keys.record(RP, spec["uuid"]),
                                store.keys.events(RP, spec["uuid"]),
                                store.keys.location(spec["uuid"]),
                                store.keys.group_member("g", spec["uuid"])}
    assert store.get(store.keys.events(RP, spec["uuid"])).lease == entry.lease
    assert instances.forget(store, spec["uuid"], RP, "g") is None  # the record is still there
    store.expire(entry.lease)  # record and events go together
    assert instances.forget(store, spec["uuid"], RP, "g") is not None
    assert keys_left(store) == set()


def test_a_hosts_transitions_write_only_its_own_keys():
    # What etcd's per-host prefix permission allows: everything under /hosts/<rp>/.
    store = FakeStore()
    spec = schedule_one(store, group={"name": "g", "policy": "affinity"})
    failed = schedule_one(store, group={"name": "g", "policy": "affinity"})
    rejected = str(uuidlib.uuid4())
    spec_revision = store.put_raw(store.keys.spec(RP, rejected), "{")
    by_host = len(store.committed)

    def read(uuid: str) -> instances.RecordRead:
        return instances.read_record(store, RP, uuid)

    entry = store.get(store.keys.spec(RP, spec["uuid"]))
    assert instances.begin_build(store, spec, entry.mod_revision, read(spec["uuid"]), "h")
    assert instances.activate(store, read(spec["uuid"]), "10.0.0.5")
    assert instances.mark_deleting(store, spec, read(spec["uuid"]))
    assert instances.delete(store, spec, read(spec["uuid"]), ttl=60)
    assert instances.fail(store, failed, read(failed["uuid"]), "x")
    assert instances.reject(store, RP, rejected, spec_revision, "x")
    written = [op.key for txn in store.committed[by_host:] for op in txn.success]
    assert len(store.committed) - by_host == 6 and written
    assert [k for k in written if not k.startswith(store.keys.host(RP))] == []


def test_move_takes_spec_record_location_and_member_to_the_new_host_together():
    store = FakeStore()
    spec = handed_over(store, group={"name": "g", "policy": "anti-affinity"})
    store.put_raw(store.keys.console(RP, spec["uuid"]), "{}")
    allocations = {OTHER: {"resources": spec["resources"]}}
    revision = instances.move(store, spec, instances.read_record(store, RP, spec["uuid"]), OTHER,
                              allocations, [])
    # 4 deletes (spec, booted, console, record) and the events moved along
    assert len(store.committed[-1].success) == instances.operations(1, grouped=True) + 6
    # Nothing of it is left on the old host.
    assert store.get_prefix(store.keys.host(RP))[0] == []
    moved_spec, _ = store.read(messages.INSTANCE_SPEC, store.keys.spec(OTHER, spec["uuid"]))
    assert moved_spec["allocations"] == allocations
    record = instances.read_record(store, OTHER, spec["uuid"])
    assert (record.state, record.record["host"], record.revision) == ("SCHEDULED", OTHER, revision)
    assert record.record["created_at"] == spec["requested_at"]
    assert instances.locate(store, spec["uuid"]) == {"host": OTHER, "group": "g",
                                                     "created_at": spec["requested_at"]}
    member, _ = store.read(messages.GROUP_MEMBER, store.keys.group_member("g", spec["uuid"]))
    assert member["host"] == OTHER


def test_move_only_over_the_record_it_read():
    store = FakeStore()
    spec = handed_over(store)
    read = instances.read_record(store, RP, spec["uuid"])
    instances.mark_deleting(store, spec, read)  # a destroy got in
    assert instances.move(store, spec, read, OTHER, {}, []) is None
    assert instances.locate(store, spec["uuid"])["host"] == RP
    assert store.get_prefix(store.keys.host(OTHER))[0] == []


def test_request_destroy_only_over_the_spec_it_read():
    store = FakeStore()
    spec = schedule_one(store)
    entry = store.get(store.keys.spec(RP, spec["uuid"]))
    store.put_raw(entry.key, json.dumps(spec))  # someone wrote it again meanwhile
    assert instances.request_destroy(store, entry, spec) is None
    entry = store.get(entry.key)
    assert instances.request_destroy(store, entry, spec) is not None
    assert store.read(messages.INSTANCE_SPEC, entry.key)[0]["action"] == "destroy"


def test_remove_forgets_every_key_on_both_sides():
    store = FakeStore()
    spec = schedule_one(store, group={"name": "g", "policy": "affinity"})
    kept = schedule_one(store, group={"name": "g", "policy": "affinity"})
    instances.fail(store, spec, instances.read_record(store, RP, spec["uuid"]), "x")
    store.put_raw(store.keys.booted(RP, spec["uuid"]), "10.0.0.2")  # a leftover goes too
    assert instances.remove(store, spec["uuid"], RP, "g") is not None
    assert all(isinstance(op, Delete) for op in store.committed[-1].success)
    assert not any(spec["uuid"] in key for key in keys_left(store))
    assert instances.locate(store, kept["uuid"])["host"] == RP  # another instance stays


def test_remove_without_a_host_forgets_the_operators_keys_only():
    store = FakeStore()
    spec = schedule_one(store, group={"name": "g", "policy": "affinity"})
    assert instances.remove(store, spec["uuid"], None, "g") is not None
    assert [op.key for op in store.committed[-1].success] == instances.operator_keys(
        store.keys, spec["uuid"], "g")
    assert keys_left(store) == {store.keys.spec(RP, spec["uuid"]),
                                store.keys.record(RP, spec["uuid"])}


def test_forget_drops_location_and_member_once_the_host_kept_nothing():
    store = FakeStore()
    spec = schedule_one(store, group={"name": "g", "policy": "affinity"})
    other = schedule_one(store)
    # While the host still has the record or the spec, nothing is forgotten.
    assert instances.forget(store, spec["uuid"], RP, "g") is None
    store.delete(store.keys.record(RP, spec["uuid"]))
    assert instances.forget(store, spec["uuid"], RP, "g") is None  # the spec is still there
    store.put_raw(store.keys.record(RP, spec["uuid"]), "{}")
    store.delete(store.keys.spec(RP, spec["uuid"]))
    assert instances.forget(store, spec["uuid"], RP, "g") is None  # the record is back
    store.delete(store.keys.record(RP, spec["uuid"]))
    assert instances.forget(store, spec["uuid"], RP, "g") is not None
    assert instances.locate(store, spec["uuid"]) is None
    assert store.get(store.keys.group_member("g", spec["uuid"])) is None
    assert instances.locate(store, other["uuid"])["host"] == RP


def test_forget_of_an_ungrouped_instance_drops_its_location():
    store = FakeStore()
    spec = schedule_one(store)
    store.delete(store.keys.spec(RP, spec["uuid"]))
    store.delete(store.keys.record(RP, spec["uuid"]))
    assert instances.forget(store, spec["uuid"], RP, None) is not None
    assert [op.key for op in store.committed[-1].success] == [store.keys.location(spec["uuid"]),
                                                              store.keys.server(spec["uuid"])]
    assert keys_left(store) == set()


def test_locate_and_find():
    store = FakeStore()
    unknown = str(uuidlib.uuid4())
    assert instances.locate(store, unknown) is None
    assert instances.find(store, unknown) == (None, instances.RecordRead(None, 0))
    spec = schedule_one(store)
    assert instances.locate(store, spec["uuid"])["host"] == RP
    host, read = instances.find(store, spec["uuid"])
    assert (host, read.state) == (RP, "SCHEDULED")
    assert read.revision == store.get(store.keys.record(RP, spec["uuid"])).mod_revision
    # Located, but its host kept no record (it expired): the host, and an absent record.
    store.delete(store.keys.record(RP, spec["uuid"]))
    assert instances.find(store, spec["uuid"]) == (RP, instances.RecordRead(None, 0))


def test_an_unreadable_location_is_found_by_searching_the_hosts():
    store = FakeStore()
    spec = schedule_one(store)
    store.put_raw(store.keys.location(spec["uuid"]), "{broken")
    assert instances.locate(store, spec["uuid"]) is None
    host, read = instances.find(store, spec["uuid"])
    assert (host, read.state) == (RP, "SCHEDULED")
    assert instances.find(store, str(uuidlib.uuid4())) == (None, instances.RecordRead(None, 0))
    store.put_raw(store.keys.location(spec["uuid"]), json.dumps({"host": "not-a-uuid"}))
    assert instances.locate(store, spec["uuid"]) is None


def test_group_members_are_the_live_ones_at_the_revision_read():
    store = FakeStore()
    group = {"name": "g", "policy": "anti-affinity"}
    building = build_one(store, group=group)
    scheduled = schedule_one(store, group=group)
    members, revision = instances.group_members(store, "g")
    assert members == {building["uuid"]: {"host": RP, "policy": "anti-affinity"},
                       scheduled["uuid"]: {"host": RP, "policy": "anti-affinity"}}
    assert revision == store.revision
    assert instances.group_members(store, "other") == ({}, store.revision)


def test_group_members_that_ended_do_not_count():
    store = FakeStore()
    group = {"name": "g", "policy": "affinity"}
    live, failed, deleted = (schedule_one(store, group=group) for _ in range(3))
    instances.fail(store, failed, instances.read_record(store, RP, failed["uuid"]), "x")
    instances.delete(store, deleted, instances.read_record(store, RP, deleted["uuid"]), ttl=60)
    revision = store.revision
    members, _ = instances.group_members(store, "g")
    assert set(members) == {live["uuid"]}
    # Their records are still there: nothing is forgotten (nothing written) yet.
    assert store.revision == revision
    assert store.get(store.keys.group_member("g", failed["uuid"])) is not None


def test_group_members_whose_record_is_gone_are_forgotten():
    store = FakeStore()
    group = {"name": "g", "policy": "affinity"}
    live, expired = schedule_one(store, group=group), schedule_one(store, group=group)
    instances.delete(store, expired, instances.read_record(store, RP, expired["uuid"]), ttl=60)
    store.delete(store.keys.record(RP, expired["uuid"]))  # the DELETED record expired
    members, _ = instances.group_members(store, "g")
    assert set(members) == {live["uuid"]}
    assert store.get(store.keys.group_member("g", expired["uuid"])) is None
    assert instances.locate(store, expired["uuid"]) is None
    assert instances.locate(store, live["uuid"]) is not None


def test_group_members_skip_unreadable_members_and_keep_unreadable_records():
    store = FakeStore()
    group = {"name": "g", "policy": "affinity"}
    garbled = schedule_one(store, group=group)
    store.put_raw(store.keys.record(RP, garbled["uuid"]), "{broken")
    store.put_raw(store.keys.group_member("g", str(uuidlib.uuid4())), "{broken")
    revision = store.revision
    members, _ = instances.group_members(store, "g")
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
    assert instances.count_by_host(store) == {RP: 3, OTHER: 1}
    assert instances.count_by_host(FakeStore()) == {}


def test_every_transition_writes_valid_messages():
    store = FakeStore()
    spec = handed_over(store, group={"name": "g", "policy": "affinity"})
    instances.move(store, spec, instances.read_record(store, RP, spec["uuid"]), OTHER,
                   {OTHER: {"resources": spec["resources"]}}, [])
    schemas = {store.keys.location(spec["uuid"]): messages.INSTANCE_LOCATION,
               store.keys.group_member("g", spec["uuid"]): messages.GROUP_MEMBER}
    for host in (RP, OTHER):
        schemas[store.keys.spec(host, spec["uuid"])] = messages.INSTANCE_SPEC
        schemas[store.keys.record(host, spec["uuid"])] = messages.INSTANCE_RECORD
        schemas[store.keys.events(host, spec["uuid"])] = messages.INSTANCE_EVENTS
    for txn in store.committed:
        for op in txn.success:
            if isinstance(op, Put):
                messages.decode(schemas[op.key], op.value)


def test_forget_leaves_an_instance_that_moved_meanwhile():
    store = FakeStore()
    spec = handed_over(store, group={"name": "g", "policy": "anti-affinity"})
    stale_location = instances.locate(store, spec["uuid"])  # a reader saw: on RP
    instances.move(store, spec, instances.read_record(store, RP, spec["uuid"]), OTHER,
                   {OTHER: {"resources": spec["resources"]}}, [])
    # The reader finds nothing on RP any more and forgets: it must not touch the moved one.
    assert instances.forget(store, spec["uuid"], stale_location["host"], "g") is None
    assert instances.locate(store, spec["uuid"])["host"] == OTHER
    assert store.get(store.keys.group_member("g", spec["uuid"])) is not None

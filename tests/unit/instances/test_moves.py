"""The operator's side moving another host's instance: spec, record, events, location and
member together, only over what it read."""

from __future__ import annotations

from etcd_compute import messages
from etcd_compute.etcd import Put
from etcd_compute.instances import host as host_txn
from etcd_compute.instances import moves, records, scheduling
from tests.unit.fakes import FakeStore
from tests.unit.instances.helpers import (
    OTHER,
    RP,
    active_one,
    ask,
    handed_over,
    log_of,
    read,
    take_up,
)


def test_move_takes_spec_record_location_and_member_to_the_new_host_together():
    store = FakeStore()
    spec = handed_over(store, group={"name": "g", "policy": "anti-affinity"})
    store.put_raw(store.keys.console(RP, spec["uuid"]), "{}")
    allocations = {OTHER: {"resources": spec["resources"]}}
    revision = moves.move(store, spec, records.read_record(store, RP, spec["uuid"]), OTHER,
                              allocations, [])
    # 6 deletes (spec, booted, console, external events, password, record) and the events
    # moved along
    assert len(store.committed[-1].success) == scheduling.operations(1, grouped=True) + 8
    # Nothing of it is left on the old host.
    assert store.get_prefix(store.keys.host(RP))[0] == []
    moved_spec, _ = store.read(messages.INSTANCE_SPEC, store.keys.spec(OTHER, spec["uuid"]))
    assert moved_spec["allocations"] == allocations
    record = records.read_record(store, OTHER, spec["uuid"])
    assert (record.state, record.record["host"], record.revision) == ("SCHEDULED", OTHER, revision)
    assert record.record["created_at"] == spec["requested_at"]
    assert records.locate(store, spec["uuid"]) == {"host": OTHER, "group": "g",
                                                     "created_at": spec["requested_at"]}
    member, _ = store.read(messages.GROUP_MEMBER, store.keys.group_member("g", spec["uuid"]))
    assert member["host"] == OTHER


def test_move_only_over_the_record_it_read():
    store = FakeStore()
    spec = handed_over(store)
    read = records.read_record(store, RP, spec["uuid"])
    host_txn.mark_deleting(store, spec, read)  # a destroy got in
    assert moves.move(store, spec, read, OTHER, {}, []) is None
    assert records.locate(store, spec["uuid"])["host"] == RP
    assert store.get_prefix(store.keys.host(OTHER))[0] == []


def test_every_transition_writes_valid_messages():
    store = FakeStore()
    spec = handed_over(store, group={"name": "g", "policy": "affinity"})
    moves.move(store, spec, records.read_record(store, RP, spec["uuid"]), OTHER,
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


def test_a_stopped_instance_of_a_dead_host_is_built_again_stopped_with_its_events():
    store = FakeStore()
    spec = active_one(store)
    take_up(store, ask(store, spec, "stop"))  # its host died while stopping it
    assert moves.evacuate(store, spec, read(store, spec["uuid"]), OTHER,
                              {OTHER: {"resources": spec["resources"]}})
    moved, _ = store.read(messages.INSTANCE_SPEC, store.keys.spec(OTHER, spec["uuid"]))
    assert moved["action"] == "build" and moved["stopped"] is True and "request" not in moved
    assert store.get(store.keys.events(RP, spec["uuid"])) is None
    log = log_of(store, spec["uuid"], OTHER)
    assert [(e["action"], e["result"]) for e in log] == [
        ("create", "success"), ("stop", "error"), ("recover", "success")]
    assert log[1]["error"] == f"its host {RP} gave it up"


def test_an_instance_out_of_default_stays_out_when_its_dead_hosts_instance_is_rebuilt():
    """Its groups are its own: the end of the action writes them into spec and record, and
    a rebuild elsewhere builds from that spec (the new host's filter is the isolated one)."""
    from etcd_compute.instances import actions as action_txn

    store = FakeStore()
    spec = active_one(store)
    asked = ask(store, spec, "security-groups", security_groups=[])
    take_up(store, asked)
    assert action_txn.end_action(store, read(store, spec["uuid"]),
                                 store.get(store.keys.spec(RP, spec["uuid"])))
    done = read(store, spec["uuid"]).record
    assert (done["state"], done["security_groups"]) == ("ACTIVE", [])
    spec, _ = store.read(messages.INSTANCE_SPEC, store.keys.spec(RP, spec["uuid"]))
    assert spec["security_groups"] == []
    assert moves.evacuate(store, spec, read(store, spec["uuid"]), OTHER,
                          {OTHER: {"resources": spec["resources"]}})
    moved, _ = store.read(messages.INSTANCE_SPEC, store.keys.spec(OTHER, spec["uuid"]))
    assert (moved["action"], moved["security_groups"]) == ("build", [])
    assert records.read_record(store, OTHER, spec["uuid"]).record["security_groups"] == []

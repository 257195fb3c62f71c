"""The operator's actions: asked (only where allowed, only over what was read), taken up,
ended (success writes the changes, failure none), refused."""

from __future__ import annotations

import json

import pytest

from etcd_compute import messages
from etcd_compute.etcd import Put
from etcd_compute.instances import actions as action_txn
from etcd_compute.instances import host as host_txn
from etcd_compute.instances import states
from tests.unit.fakes import FakeStore
from tests.unit.instances.helpers import (
    ACTIONS,
    ALLOWED_ACTIONS,
    NEW_SIZE,
    RP,
    STATES,
    active_one,
    ask,
    in_state,
    log_of,
    read,
    schedule_one,
    take_up,
)


def test_request_destroy_only_over_the_spec_it_read():
    store = FakeStore()
    spec = schedule_one(store)
    entry = store.get(store.keys.spec(RP, spec["uuid"]))
    store.put_raw(entry.key, json.dumps(spec))  # someone wrote it again meanwhile
    assert action_txn.request_destroy(store, entry, spec) is None
    entry = store.get(entry.key)
    assert action_txn.request_destroy(store, entry, spec) is not None
    assert store.read(messages.INSTANCE_SPEC, entry.key)[0]["action"] == "destroy"



@pytest.mark.parametrize(("action", "state"), [(a, s) for a in ACTIONS for s in STATES[1:]
                                               if (a, s) not in ALLOWED_ACTIONS])
def test_a_refused_request_writes_nothing(action, state):
    store = FakeStore()
    spec = active_one(store)
    in_state(store, spec, state)
    entry, before = store.get(store.keys.spec(RP, spec["uuid"])), store.revision
    with pytest.raises(states.ActionRefused):
        action_txn.request_action(store, entry, spec, read(store, spec["uuid"]), action,
                                 action_txn.new_request("ann@desk"))
    assert store.revision == before


@pytest.mark.parametrize(("action", "state"), sorted(ALLOWED_ACTIONS))
def test_an_allowed_request_rewrites_only_the_spec(action, state):
    store = FakeStore()
    spec = active_one(store)
    in_state(store, spec, state)
    before = len(store.committed)
    asked = ask(store, spec, action, hard=True)
    assert (asked["action"], asked["request"]["by"], asked["request"]["hard"]) == (
        action, "ann@desk", True)
    (txn,) = store.committed[before:]
    assert [op.key for op in txn.success] == [store.keys.spec(RP, spec["uuid"])]
    assert read(store, spec["uuid"]).state == state  # the host moves it, not the operator


def test_a_request_only_over_the_spec_and_record_it_read():
    store = FakeStore()
    spec = active_one(store)
    entry = store.get(store.keys.spec(RP, spec["uuid"]))
    stale = read(store, spec["uuid"])
    in_state(store, spec, "ACTIVE")  # the record moved after it was read
    assert action_txn.request_action(store, entry, spec, stale, "stop",
                                    action_txn.new_request(None)) is None
    store.put_raw(entry.key, store.get(entry.key).value)  # and now the spec
    assert action_txn.request_action(store, entry, spec, read(store, spec["uuid"]), "stop",
                                    action_txn.new_request(None)) is None


def test_begin_keeps_the_request_as_the_task_and_starts_an_event():
    store = FakeStore()
    spec = active_one(store)
    asked = ask(store, spec, "stop")
    take_up(store, asked)
    record = read(store, spec["uuid"]).record
    assert record["state"] == "STOPPING" and record["request_id"] == asked["request"]["id"]
    assert record["task"] == {**asked["request"], "action": "stop", "from": "ACTIVE"}
    last = log_of(store, spec["uuid"])[-1]
    assert (last["action"], last["result"], last["by"], last["request_id"]) == (
        "stop", "running", "ann@desk", asked["request"]["id"])


@pytest.mark.parametrize(("action", "start", "end"), [
    ("stop", "ACTIVE", "SHUTOFF"), ("start", "SHUTOFF", "ACTIVE"),
    ("reboot", "ACTIVE", "ACTIVE"), ("rebuild", "ACTIVE", "ACTIVE"),
    ("rebuild", "SHUTOFF", "SHUTOFF"), ("resize", "ACTIVE", "ACTIVE"),
    ("resize", "SHUTOFF", "SHUTOFF"), ("snapshot", "ACTIVE", "ACTIVE"),
    ("snapshot", "SHUTOFF", "SHUTOFF")])
def test_an_action_that_succeeds_ends_where_it_should(action, start, end):
    store = FakeStore()
    spec = active_one(store)
    in_state(store, spec, start)
    asked = ask(store, spec, action)
    take_up(store, asked)
    entry = store.get(store.keys.spec(RP, spec["uuid"]))
    assert action_txn.end_action(store, read(store, spec["uuid"]), entry)
    record = read(store, spec["uuid"]).record
    assert record["state"] == end and "task" not in record
    assert log_of(store, spec["uuid"])[-1]["result"] == "success"


def test_a_snapshot_passes_through_its_own_state_and_its_event_names_the_image():
    store = FakeStore()
    spec = active_one(store)
    snapshot = {"image_id": "6f1c1a52-3d4e-4c3b-9a55-2b0c6d8e9f10", "name": "snap1"}
    asked = ask(store, spec, "snapshot", snapshot=snapshot)
    take_up(store, asked)
    record = read(store, spec["uuid"]).record
    assert record["state"] == "SNAPSHOTTING" and record["task"]["from"] == "ACTIVE"
    assert record["task"]["snapshot"] == snapshot
    entry = store.get(store.keys.spec(RP, spec["uuid"]))
    detail = f"image {snapshot['image_id']}: 12 MiB, live, 3.2 s"
    assert action_txn.end_action(store, read(store, spec["uuid"]), entry, detail=detail)
    assert read(store, spec["uuid"]).record["state"] == "ACTIVE"
    last = log_of(store, spec["uuid"])[-1]
    assert (last["action"], last["result"], last["detail"]) == ("snapshot", "success", detail)
    # Nothing of the snapshot is written into the spec: the instance is as it was.
    assert "snapshot" not in messages.decode(messages.INSTANCE_SPEC, store.get(entry.key).value)


def test_a_resize_that_succeeds_writes_the_new_size_into_record_and_spec():
    store = FakeStore()
    spec = active_one(store, query="resources=VCPU:1&required=CUSTOM_FAST")
    query = "resources=DISK_GB:2,MEMORY_MB:128,VCPU:2&required=CUSTOM_FAST"
    asked = ask(store, spec, "resize", resources=NEW_SIZE,
                allocations={RP: {"resources": NEW_SIZE}}, query=query)
    take_up(store, asked)
    assert read(store, spec["uuid"]).record["resources"] == spec["resources"]  # not yet
    entry = store.get(store.keys.spec(RP, spec["uuid"]))
    assert action_txn.end_action(store, read(store, spec["uuid"]), entry)
    assert read(store, spec["uuid"]).record["resources"] == NEW_SIZE
    now = messages.decode(messages.INSTANCE_SPEC, store.get(entry.key).value)
    assert (now["resources"], now["allocations"], now["query"]) == (
        NEW_SIZE, {RP: {"resources": NEW_SIZE}}, query)


HOLD = {"consumer": "0b5d6c43-43f6-4c1e-9f8b-6c5a8a6f2a11",
        "allocations": {RP: {"resources": {"VCPU": 1}}}, "resources": {"VCPU": 1}}


def test_a_held_resize_that_succeeds_keeps_its_hold_on_the_record():
    store = FakeStore()
    spec = active_one(store)
    asked = ask(store, spec, "resize", resources=NEW_SIZE,
                allocations={RP: {"resources": NEW_SIZE}}, hold=HOLD)
    take_up(store, asked)
    entry = store.get(store.keys.spec(RP, spec["uuid"]))
    assert action_txn.end_action(store, read(store, spec["uuid"]), entry)
    record = read(store, spec["uuid"]).record
    assert record["resize_hold"] == {**HOLD, "request_id": asked["request"]["id"]}
    # It stays through what follows (a stop), until a revert ends it.
    take_up(store, ask(store, spec, "stop"))
    action_txn.end_action(store, read(store, spec["uuid"]), None)
    assert read(store, spec["uuid"]).record["resize_hold"]["consumer"] == HOLD["consumer"]
    take_up(store, ask(store, spec, "start"))
    action_txn.end_action(store, read(store, spec["uuid"]), None)
    back = ask(store, spec, "resize", resources=spec["resources"], reverts=HOLD["consumer"],
               allocations=HOLD["allocations"])
    take_up(store, back)
    entry = store.get(store.keys.spec(RP, spec["uuid"]))
    assert action_txn.end_action(store, read(store, spec["uuid"]), entry)
    record = read(store, spec["uuid"]).record
    assert record["resize_hold"] is None and record["resources"] == spec["resources"]


def test_a_held_resize_that_fails_leaves_no_hold_on_the_record():
    store = FakeStore()
    spec = active_one(store)
    take_up(store, ask(store, spec, "resize", resources=NEW_SIZE,
                       allocations={RP: {"resources": NEW_SIZE}}, hold=HOLD))
    entry = store.get(store.keys.spec(RP, spec["uuid"]))
    assert action_txn.end_action(store, read(store, spec["uuid"]), entry, "no room")
    assert "resize_hold" not in read(store, spec["uuid"]).record


def test_a_rebuild_may_give_new_user_data_and_key_written_into_the_spec():
    store = FakeStore()
    spec = active_one(store)
    take_up(store, ask(store, spec, "rebuild", user_data="#!/bin/sh\necho new", ssh_key=None))
    entry = store.get(store.keys.spec(RP, spec["uuid"]))
    assert action_txn.end_action(store, read(store, spec["uuid"]), entry)
    now = messages.decode(messages.INSTANCE_SPEC, store.get(entry.key).value)
    assert (now["user_data"], now["ssh_key"]) == ("#!/bin/sh\necho new", None)


def test_a_rebuild_that_succeeds_writes_its_new_image():
    store = FakeStore()
    spec = active_one(store)
    image = {"url": "https://images.example/new.qcow2", "sha256": None}
    take_up(store, ask(store, spec, "rebuild", image=image))
    entry = store.get(store.keys.spec(RP, spec["uuid"]))
    assert action_txn.end_action(store, read(store, spec["uuid"]), entry, ip="10.0.0.5")
    assert read(store, spec["uuid"]).record["image"] == image["url"]
    assert messages.decode(messages.INSTANCE_SPEC, store.get(entry.key).value)["image"] == image


@pytest.mark.parametrize("action", ["stop", "resize", "rebuild"])
def test_an_action_that_fails_leaves_record_and_spec_as_they_were(action):
    store = FakeStore()
    spec = active_one(store)
    asked = ask(store, spec, action, resources=NEW_SIZE,
                allocations={RP: {"resources": NEW_SIZE}},
                image={"url": "file:///refused", "sha256": None})
    take_up(store, asked)
    entry = store.get(store.keys.spec(RP, spec["uuid"]))
    assert action_txn.end_action(store, read(store, spec["uuid"]), entry, error="disk full")
    record = read(store, spec["uuid"]).record
    assert (record["state"], record["resources"], record["image"]) == (
        "ACTIVE", spec["resources"], spec["image"]["url"])
    assert store.get(entry.key).mod_revision == entry.mod_revision  # the spec untouched
    last = log_of(store, spec["uuid"])[-1]
    assert (last["action"], last["result"], last["error"]) == (action, "error", "disk full")


def test_refuse_notes_the_request_and_why_and_changes_nothing_else():
    store = FakeStore()
    spec = active_one(store)
    in_state(store, spec, "SHUTOFF")
    # Written past the CLI's check (straight to etcd): a reboot of a stopped instance.
    entry = store.get(store.keys.spec(RP, spec["uuid"]))
    hostile = {**spec, "action": "reboot", "request": action_txn.new_request("mallory")}
    store.put(messages.INSTANCE_SPEC, entry.key, hostile)
    before = len(store.committed)
    assert action_txn.refuse_action(store, hostile, store.get(entry.key).mod_revision,
                                   read(store, spec["uuid"]), "not allowed")
    record = read(store, spec["uuid"]).record
    assert (record["state"], record["request_id"]) == ("SHUTOFF", hostile["request"]["id"])
    last = log_of(store, spec["uuid"])[-1]
    assert (last["action"], last["result"], last["error"], last["by"]) == (
        "reboot", "refused", "not allowed", "mallory")
    (txn,) = store.committed[before:]
    assert sorted(op.key for op in txn.success) == sorted(
        [store.keys.record(RP, spec["uuid"]), store.keys.events(RP, spec["uuid"])])


def test_the_action_transactions_write_valid_messages_and_only_the_hosts_keys():
    store = FakeStore()
    spec = active_one(store)
    by_host = []  # the transactions the host commits (begin, end, a power change)

    def as_host(step) -> None:
        before = len(store.committed)
        assert step()
        by_host.extend(store.committed[before:])

    for action, params in [("stop", {}), ("start", {}), ("reboot", {"hard": True}),
                           ("resize", {"resources": NEW_SIZE,
                                       "allocations": {RP: {"resources": NEW_SIZE}}}),
                           ("rebuild", {"image": {"url": "https://i/x.img", "sha256": None}})]:
        spec = ask(store, spec, action, **params)
        entry = store.get(store.keys.spec(RP, spec["uuid"]))
        as_host(lambda spec=spec, entry=entry: action_txn.begin_action(
            store, spec, entry.mod_revision, read(store, spec["uuid"])))
        entry = store.get(entry.key)
        as_host(lambda entry=entry, spec=spec: action_txn.end_action(
            store, read(store, spec["uuid"]), entry, ip="10.0.0.5"))
        spec = messages.decode(messages.INSTANCE_SPEC, store.get(entry.key).value)
    as_host(lambda: host_txn.power_changed(store, read(store, spec["uuid"]), False, "off"))
    schemas = {store.keys.spec(RP, spec["uuid"]): messages.INSTANCE_SPEC,
               store.keys.record(RP, spec["uuid"]): messages.INSTANCE_RECORD,
               store.keys.events(RP, spec["uuid"]): messages.INSTANCE_EVENTS,
               store.keys.booted(RP, spec["uuid"]): None}
    for txn in by_host:
        for op in txn.success:
            assert op.key.startswith(store.keys.host(RP))  # what its etcd role allows
            if isinstance(op, Put) and schemas[op.key]:
                messages.decode(schemas[op.key], op.value)
    assert len(log_of(store, spec["uuid"])) == 7  # create, five actions, a power-off

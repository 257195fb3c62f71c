"""The instance model's lifecycle part (instances.py): the operator's actions allowed and
refused in every state, and the transactions of an action (request, begin, end, refuse),
of a power change seen by the hypervisor, and of moving a stopped instance."""

from __future__ import annotations

import uuid as uuidlib

import pytest

from etcd_compute import events, instances, messages
from etcd_compute.etcd import Put
from tests.support import make_spec
from tests.unit.fakes import FakeStore

RP, OTHER = str(uuidlib.uuid4()), str(uuidlib.uuid4())
STATES = [None, *instances.STATES]
ACTIONS = list(instances.ACTIONS)
ALLOWED = {("stop", "ACTIVE"), ("start", "SHUTOFF"), ("reboot", "ACTIVE"),
           ("rebuild", "ACTIVE"), ("rebuild", "SHUTOFF"), ("resize", "ACTIVE"),
           ("resize", "SHUTOFF"), ("snapshot", "ACTIVE"), ("snapshot", "SHUTOFF")}
NEW_SIZE = {"VCPU": 2, "MEMORY_MB": 128, "DISK_GB": 2}


def read(store: FakeStore, uuid: str, host: str = RP) -> instances.RecordRead:
    return instances.read_record(store, host, uuid)


def active_one(store: FakeStore, **extra) -> dict:
    """A scheduled instance its host built: ACTIVE."""
    spec = make_spec(RP, **extra)
    assert instances.schedule(store, [(spec, "host-a")]) is not None
    entry = store.get(store.keys.spec(RP, spec["uuid"]))
    assert instances.begin_build(store, spec, entry.mod_revision, read(store, spec["uuid"]),
                                 "host-a")
    assert instances.activate(store, read(store, spec["uuid"]), "10.0.0.5")
    return spec


def in_state(store: FakeStore, spec: dict, state: str | None) -> None:
    """Force the record into `state` (None: no record), as if it had got there."""
    key = store.keys.record(RP, spec["uuid"])
    if state is None:
        store.delete(key)
        return
    record = read(store, spec["uuid"]).record
    store.put(messages.INSTANCE_RECORD, key, {**record, "state": state})


def ask(store: FakeStore, spec: dict, action: str, **params) -> dict:
    """The operator writes `action` into the spec (as schedule.py does); the spec now."""
    entry = store.get(store.keys.spec(RP, spec["uuid"]))
    request = instances.new_request("ann@desk", **params)
    assert instances.request_action(store, entry, spec, read(store, spec["uuid"]), action,
                                    request) is not None
    return messages.decode(messages.INSTANCE_SPEC, store.get(entry.key).value)


def take_up(store: FakeStore, spec: dict) -> None:
    entry = store.get(store.keys.spec(RP, spec["uuid"]))
    assert instances.begin_action(store, spec, entry.mod_revision, read(store, spec["uuid"]))


def log_of(store: FakeStore, uuid: str, host: str = RP) -> list[dict]:
    return events.read(store, host, uuid)


# --------------------------------------------------------------------- the table


@pytest.mark.parametrize("state", STATES)
@pytest.mark.parametrize("action", ACTIONS)
def test_every_action_in_every_state_is_allowed_or_refused_naming_both(action, state):
    if (action, state) in ALLOWED:
        instances.check_action(state, action)
        assert action in instances.allowed_actions(state)
        return
    with pytest.raises(instances.ActionRefused) as refused:
        instances.check_action(state, action, "u-1")
    message = str(refused.value)
    assert message.startswith(f"instance u-1 is {state or 'without a record'}: {action} is "
                              "not allowed now (allowed: ")
    allowed = message.split("(allowed: ")[1].rstrip(")").split(", ")
    assert allowed == instances.allowed_actions(state) and allowed[-1] == "destroy"
    assert action not in allowed


@pytest.mark.parametrize("state", STATES)
def test_destroy_is_allowed_in_every_state(state):
    instances.check_action(state, "destroy")


@pytest.mark.parametrize(("action", "state"), [(a, s) for a in ACTIONS for s in STATES[1:]
                                               if (a, s) not in ALLOWED])
def test_a_refused_request_writes_nothing(action, state):
    store = FakeStore()
    spec = active_one(store)
    in_state(store, spec, state)
    entry, before = store.get(store.keys.spec(RP, spec["uuid"])), store.revision
    with pytest.raises(instances.ActionRefused):
        instances.request_action(store, entry, spec, read(store, spec["uuid"]), action,
                                 instances.new_request("ann@desk"))
    assert store.revision == before


@pytest.mark.parametrize(("action", "state"), sorted(ALLOWED))
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
    assert instances.request_action(store, entry, spec, stale, "stop",
                                    instances.new_request(None)) is None
    store.put_raw(entry.key, store.get(entry.key).value)  # and now the spec
    assert instances.request_action(store, entry, spec, read(store, spec["uuid"]), "stop",
                                    instances.new_request(None)) is None


@pytest.mark.parametrize("transient", sorted(instances.TRANSIENT))
def test_an_action_in_progress_ends_as_it_may_and_goes_nowhere_else(transient):
    for target in ("ACTIVE", "SHUTOFF", "DELETING", "DELETED", "ERROR", "SCHEDULED"):
        instances.check_transition(transient, target)
    for target in ("BUILDING", "RESCHEDULING", *instances.TRANSIENT):
        with pytest.raises(instances.InvalidTransition):
            instances.check_transition(transient, target)


def test_power_changes_and_builds_powered_off_are_transitions():
    for current, target in [("ACTIVE", "SHUTOFF"), ("SHUTOFF", "ACTIVE"),
                            ("BUILDING", "SHUTOFF"), ("SHUTOFF", "SCHEDULED"),
                            ("SHUTOFF", "RESCHEDULING")]:
        instances.check_transition(current, target)
    for current, target in [("SCHEDULED", "SHUTOFF"), ("ERROR", "SHUTOFF"),
                            ("DELETED", "SHUTOFF"), ("SHUTOFF", "BUILDING")]:
        with pytest.raises(instances.InvalidTransition):
            instances.check_transition(current, target)


# --------------------------------------------------------------- an action's steps


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
    assert instances.end_action(store, read(store, spec["uuid"]), entry)
    record = read(store, spec["uuid"]).record
    assert record["state"] == end and "task" not in record
    assert log_of(store, spec["uuid"])[-1]["result"] == "success"


def test_a_snapshot_passes_through_its_own_state_and_its_event_names_the_image():
    store = FakeStore()
    spec = active_one(store)
    snapshot = {"image_id": str(uuidlib.uuid4()), "name": "snap1"}
    asked = ask(store, spec, "snapshot", snapshot=snapshot)
    take_up(store, asked)
    record = read(store, spec["uuid"]).record
    assert record["state"] == "SNAPSHOTTING" and record["task"]["from"] == "ACTIVE"
    assert record["task"]["snapshot"] == snapshot
    entry = store.get(store.keys.spec(RP, spec["uuid"]))
    detail = f"image {snapshot['image_id']}: 12 MiB, live, 3.2 s"
    assert instances.end_action(store, read(store, spec["uuid"]), entry, detail=detail)
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
    assert instances.end_action(store, read(store, spec["uuid"]), entry)
    assert read(store, spec["uuid"]).record["resources"] == NEW_SIZE
    now = messages.decode(messages.INSTANCE_SPEC, store.get(entry.key).value)
    assert (now["resources"], now["allocations"], now["query"]) == (
        NEW_SIZE, {RP: {"resources": NEW_SIZE}}, query)


def test_a_rebuild_that_succeeds_writes_its_new_image():
    store = FakeStore()
    spec = active_one(store)
    image = {"url": "https://images.example/new.qcow2", "sha256": None}
    take_up(store, ask(store, spec, "rebuild", image=image))
    entry = store.get(store.keys.spec(RP, spec["uuid"]))
    assert instances.end_action(store, read(store, spec["uuid"]), entry, ip="10.0.0.5")
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
    assert instances.end_action(store, read(store, spec["uuid"]), entry, error="disk full")
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
    hostile = {**spec, "action": "reboot", "request": instances.new_request("mallory")}
    store.put(messages.INSTANCE_SPEC, entry.key, hostile)
    before = len(store.committed)
    assert instances.refuse_action(store, hostile, store.get(entry.key).mod_revision,
                                   read(store, spec["uuid"]), "not allowed")
    record = read(store, spec["uuid"]).record
    assert (record["state"], record["request_id"]) == ("SHUTOFF", hostile["request"]["id"])
    last = log_of(store, spec["uuid"])[-1]
    assert (last["action"], last["result"], last["error"], last["by"]) == (
        "reboot", "refused", "not allowed", "mallory")
    (txn,) = store.committed[before:]
    assert sorted(op.key for op in txn.success) == sorted(
        [store.keys.record(RP, spec["uuid"]), store.keys.events(RP, spec["uuid"])])


@pytest.mark.parametrize(("running", "crashed", "state", "action", "result"), [
    (False, False, "SHUTOFF", "power-off", "success"),
    (False, True, "SHUTOFF", "power-off", "error"),
])
def test_a_power_change_seen_by_the_hypervisor(running, crashed, state, action, result):
    store = FakeStore()
    spec = active_one(store)
    assert instances.power_changed(store, read(store, spec["uuid"]), running, "why", crashed)
    assert read(store, spec["uuid"]).state == state
    last = log_of(store, spec["uuid"])[-1]
    assert (last["action"], last["result"], last["by"]) == (action, result, "hypervisor")
    assert instances.power_changed(store, read(store, spec["uuid"]), True, "started")
    assert read(store, spec["uuid"]).state == "ACTIVE"
    assert log_of(store, spec["uuid"])[-1]["action"] == "power-on"


def test_a_destroy_during_an_action_cuts_it_short():
    store = FakeStore()
    spec = active_one(store)
    take_up(store, ask(store, spec, "rebuild"))
    destroy = {**spec, "action": "destroy", "request": instances.new_request("bob")}
    assert instances.mark_deleting(store, destroy, read(store, spec["uuid"]))
    record = read(store, spec["uuid"]).record
    assert record["state"] == "DELETING" and "task" not in record
    rebuild, destroying = log_of(store, spec["uuid"])[-2:]
    assert (rebuild["action"], rebuild["result"], rebuild["error"]) == (
        "rebuild", "error", "cancelled: destroy asked")
    assert (destroying["action"], destroying["result"], destroying["by"]) == (
        "destroy", "running", "bob")


# ---------------------------------------------------------- stopped, built elsewhere


@pytest.mark.parametrize(("state", "action", "start", "stopped"), [
    ("ACTIVE", None, None, False), ("SHUTOFF", None, None, True),
    ("STOPPING", "stop", "ACTIVE", True), ("STARTING", "start", "SHUTOFF", False),
    ("RESIZING", "resize", "SHUTOFF", True), ("REBUILDING", "rebuild", "ACTIVE", False),
    ("REBOOTING", "reboot", "ACTIVE", False)])
def test_wants_stopped_follows_the_state_and_the_action_under_way(state, action, start,
                                                                 stopped):
    record = {"state": state}
    if action:
        record["task"] = {"action": action, "from": start}
    assert instances.wants_stopped(record, {}) is stopped


def test_a_build_keeps_its_specs_wish():
    for state in ("SCHEDULED", "BUILDING", "RESCHEDULING"):
        assert instances.wants_stopped({"state": state}, {"stopped": True})
        assert not instances.wants_stopped({"state": state}, {})


def test_a_stopped_instance_of_a_dead_host_is_built_again_stopped_with_its_events():
    store = FakeStore()
    spec = active_one(store)
    take_up(store, ask(store, spec, "stop"))  # its host died while stopping it
    assert instances.evacuate(store, spec, read(store, spec["uuid"]), OTHER,
                              {OTHER: {"resources": spec["resources"]}})
    moved, _ = store.read(messages.INSTANCE_SPEC, store.keys.spec(OTHER, spec["uuid"]))
    assert moved["action"] == "build" and moved["stopped"] is True and "request" not in moved
    assert store.get(store.keys.events(RP, spec["uuid"])) is None
    log = log_of(store, spec["uuid"], OTHER)
    assert [(e["action"], e["result"]) for e in log] == [
        ("create", "success"), ("stop", "error"), ("recover", "success")]
    assert log[1]["error"] == f"its host {RP} gave it up"


# --------------------------------------------------------------------- messages, keys


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
        as_host(lambda spec=spec, entry=entry: instances.begin_action(
            store, spec, entry.mod_revision, read(store, spec["uuid"])))
        entry = store.get(entry.key)
        as_host(lambda entry=entry, spec=spec: instances.end_action(
            store, read(store, spec["uuid"]), entry, ip="10.0.0.5"))
        spec = messages.decode(messages.INSTANCE_SPEC, store.get(entry.key).value)
    as_host(lambda: instances.power_changed(store, read(store, spec["uuid"]), False, "off"))
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


def test_events_stay_bounded():
    store = FakeStore()
    spec = active_one(store)
    for _ in range(events.MAX_EVENTS + 10):
        assert instances.power_changed(store, read(store, spec["uuid"]),
                                       read(store, spec["uuid"]).state == "SHUTOFF", "flap")
    log = log_of(store, spec["uuid"])
    assert len(log) == events.MAX_EVENTS and log[0]["action"].startswith("power-")

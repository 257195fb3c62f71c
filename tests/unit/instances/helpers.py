"""Instances in the in-memory store, as the instance model's tests need them: scheduled,
built, handed over, ACTIVE, with an action asked and taken up."""

from __future__ import annotations

import uuid as uuidlib

from etcd_compute import events, messages
from etcd_compute.instances import actions as action_txn
from etcd_compute.instances import host as host_txn
from etcd_compute.instances import records, scheduling, states
from tests.support import make_spec
from tests.unit.fakes import FakeStore

RP, OTHER = str(uuidlib.uuid4()), str(uuidlib.uuid4())
NEW_SIZE = {"VCPU": 2, "MEMORY_MB": 128, "DISK_GB": 2}


def schedule_one(store: FakeStore, **extra) -> dict:
    spec = make_spec(RP, **extra)
    assert scheduling.schedule(store, [(spec, "host-a")]) is not None
    return spec


def build_one(store: FakeStore, **extra) -> dict:
    """A scheduled instance its host started building."""
    spec = schedule_one(store, **extra)
    assert host_txn.begin_build(store, spec, store.get(store.keys.spec(RP, spec["uuid"]))
                                 .mod_revision, records.read_record(store, RP, spec["uuid"]),
                                 "h") is not None
    return spec


def handed_over(store: FakeStore, **extra) -> dict:
    """An instance whose build failed on RP, handed to the controller (RESCHEDULING)."""
    spec = build_one(store, **extra)
    assert host_txn.hand_over(store, spec, records.read_record(store, RP, spec["uuid"]),
                               "disk full") is not None
    return spec


def keys_left(store: FakeStore) -> set[str]:
    return {e.key for e in store.get_prefix("")[0]}


def _as_read(store: FakeStore, spec: dict) -> tuple:
    uuid = spec["uuid"]
    return (RP, uuid, (spec.get("group") or {}).get("name"),
            store.get(store.keys.record(RP, uuid)).mod_revision,
            store.get(store.keys.spec(RP, uuid)).mod_revision)


def read(store: FakeStore, uuid: str, host: str = RP) -> records.RecordRead:
    return records.read_record(store, host, uuid)


def active_one(store: FakeStore, **extra) -> dict:
    """A scheduled instance its host built: ACTIVE."""
    spec = make_spec(RP, **extra)
    assert scheduling.schedule(store, [(spec, "host-a")]) is not None
    entry = store.get(store.keys.spec(RP, spec["uuid"]))
    assert host_txn.begin_build(store, spec, entry.mod_revision, read(store, spec["uuid"]),
                                 "host-a")
    assert host_txn.activate(store, read(store, spec["uuid"]), "10.0.0.5")
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
    request = action_txn.new_request("ann@desk", **params)
    assert action_txn.request_action(store, entry, spec, read(store, spec["uuid"]), action,
                                    request) is not None
    return messages.decode(messages.INSTANCE_SPEC, store.get(entry.key).value)


def take_up(store: FakeStore, spec: dict) -> None:
    entry = store.get(store.keys.spec(RP, spec["uuid"]))
    assert action_txn.begin_action(store, spec, entry.mod_revision, read(store, spec["uuid"]))


def log_of(store: FakeStore, uuid: str, host: str = RP) -> list[dict]:
    return events.read(store, host, uuid)


STATES = [None, *states.STATES]
ACTIONS = list(states.ACTIONS)

ALLOWED_ACTIONS = {("stop", "ACTIVE"), ("start", "SHUTOFF"), ("suspend", "ACTIVE"),
                   ("resume", "SUSPENDED"), ("pause", "ACTIVE"), ("unpause", "PAUSED"),
                   ("reboot", "ACTIVE"), ("reboot", "PAUSED"), ("snapshot", "PAUSED"),
           ("rebuild", "ACTIVE"), ("rebuild", "SHUTOFF"), ("resize", "ACTIVE"),
           ("resize", "SHUTOFF"), ("snapshot", "ACTIVE"), ("snapshot", "SHUTOFF"),
           ("snapshot", "SUSPENDED"), ("security-groups", "ACTIVE"),
           ("security-groups", "SHUTOFF"), ("attach-interface", "ACTIVE"),
           ("attach-interface", "SHUTOFF"), ("detach-interface", "ACTIVE"),
           ("detach-interface", "SHUTOFF"),
           ("migrate", "ACTIVE"), ("migrate", "SHUTOFF")}

"""instances/migrations.py in the in-memory store: each step of a move once, compared with
what was read, from the operator's ask to the hand-over or the discard."""

from __future__ import annotations

import time
import uuid as uuidlib

import pytest

from etcd_compute import events, messages
from etcd_compute.instances import actions as action_txn
from etcd_compute.instances import host as host_txn
from etcd_compute.instances import migrations, records, states
from tests.unit.fakes import FakeStore
from tests.unit.instances.helpers import OTHER, RP, build_one

TARGET = {"address": "10.0.0.2", "instance_dir": "/srv/i", "base_sha256": None,
          "dhcp_server": None, "network": None}


def active(store: FakeStore, **extra) -> dict:
    spec = build_one(store, **extra)
    host_txn.activate(store, records.read_record(store, RP, spec["uuid"]), "192.168.1.5")
    return spec


def read(store: FakeStore, host: str, uuid: str) -> records.RecordRead:
    return records.read_record(store, host, uuid)


def spec_of(store: FakeStore, host: str, uuid: str) -> tuple:
    entry = store.get(store.keys.spec(host, uuid))
    return entry, messages.decode(messages.INSTANCE_SPEC, entry.value)


def asked(store: FakeStore, live: bool = True, **extra) -> tuple[dict, dict, dict]:
    spec = active(store, **extra)
    uuid = spec["uuid"]
    entry, spec = spec_of(store, RP, uuid)
    request = action_txn.new_request("alice", live=live, destination=OTHER,
                                     migration=str(uuidlib.uuid4()))
    migration = {"id": request["migration"], "instance": uuid, "source": RP,
                 "destination": OTHER, "destination_name": "host-b", "live": live,
                 "state": migrations.PREPARING, "request_id": request["id"], "by": "alice",
                 "requested_at": time.time(), "updated_at": time.time(),
                 "source_allocations": spec["allocations"],
                 "destination_allocations": {OTHER: {"resources": spec["resources"]}}}
    assert migrations.ask(store, spec, entry, read(store, RP, uuid), migration, request,
                          "host-b") is not None
    return spec, request, migration


def test_asking_writes_the_migration_the_source_s_request_and_the_arrival_at_once():
    store = FakeStore()
    spec, request, migration = asked(store)
    uuid = spec["uuid"]
    assert migrations.read(store, uuid)[0] == migration
    _, source_spec = spec_of(store, RP, uuid)
    assert source_spec["action"] == "migrate" and source_spec["request"] == request
    _, arriving = spec_of(store, OTHER, uuid)
    assert arriving["action"] == "incoming" and arriving["host"] == OTHER
    assert arriving["allocations"] == {OTHER: {"resources": spec["resources"]}}
    assert arriving["request"]["source"] == RP and arriving["request"]["from"] == "ACTIVE"
    there = read(store, OTHER, uuid)
    assert (there.state, there.record["host_name"], there.record["ip"]) == (
        "INCOMING", "host-b", None)
    assert read(store, RP, uuid).state == "ACTIVE"  # the source takes it up itself


def test_a_second_ask_or_an_ask_in_a_state_that_does_not_allow_it_writes_nothing():
    store = FakeStore()
    spec, request, migration = asked(store)
    entry, now = spec_of(store, RP, spec["uuid"])
    before = store.revision
    assert migrations.ask(store, now, entry, read(store, RP, spec["uuid"]), migration, request,
                          "host-b") is None
    assert store.revision == before
    stopped = build_one(store)  # BUILDING
    entry, stopped = spec_of(store, RP, stopped["uuid"])
    with pytest.raises(states.ActionRefused, match="migrate is not allowed"):
        migrations.ask(store, stopped, entry, read(store, RP, stopped["uuid"]),
                       {**migration, "instance": stopped["uuid"]}, request, None)


def test_the_destination_answers_the_controller_relays_the_source_moves():
    store = FakeStore()
    spec, request, migration = asked(store)
    uuid = spec["uuid"]
    assert migrations.answer(store, read(store, OTHER, uuid), target=TARGET) is not None
    assert read(store, OTHER, uuid).record["task"]["target"] == TARGET
    entry, source_spec = spec_of(store, RP, uuid)
    migration, migration_entry = migrations.read(store, uuid)
    assert migrations.relay(store, entry, source_spec, migration_entry, migration,
                            TARGET) is not None
    assert spec_of(store, RP, uuid)[1]["request"]["target"] == TARGET
    assert migrations.read(store, uuid)[0]["state"] == "migrating"
    # The source takes it up and the guest leaves.
    entry, source_spec = spec_of(store, RP, uuid)
    assert action_txn.begin_action(store, source_spec, entry.mod_revision,
                                   read(store, RP, uuid)) is not None
    assert read(store, RP, uuid).state == "MIGRATING"
    figures = {"seconds": 7.5, "downtime_ms": 250, "data_total": 128 << 20}
    assert migrations.migrated(store, read(store, RP, uuid), figures) is not None
    source = read(store, RP, uuid)
    assert source.state == "MIGRATED" and source.record["task"]["figures"] == figures
    last = events.read(store, RP, uuid)[-1]
    assert (last["action"], last["result"], last["detail"]) == (
        "migrate", "success", "7.5 s, downtime 250 ms, 128 MiB of memory")
    # The event says which kind of move it was (the compute API names them apart).
    assert last["live"] is source_spec["request"]["live"]

    migration, migration_entry = migrations.read(store, uuid)
    entry, source_spec = spec_of(store, RP, uuid)
    assert migrations.hand_over(store, migration_entry, migration, entry, source_spec,
                                source, read(store, OTHER, uuid)) is not None
    there = read(store, OTHER, uuid)
    assert (there.state, there.record["ip"], there.record["task"]) == (
        "ACTIVE", "192.168.1.5", None)
    _, moved_spec = spec_of(store, OTHER, uuid)
    assert moved_spec["action"] == "build" and "request" not in moved_spec
    assert records.locate(store, uuid)["host"] == OTHER
    assert store.get(store.keys.booted(OTHER, uuid)).value == b"192.168.1.5"
    assert store.get_prefix(store.keys.host(RP))[0] == []  # nothing of it left there
    assert migrations.read(store, uuid) == (None, None)
    assert [e["action"] for e in events.read(store, OTHER, uuid)][-1] == "migrate"


def test_a_hand_over_compares_all_three():
    store = FakeStore()
    spec, request, migration = asked(store)
    uuid = spec["uuid"]
    migration, migration_entry = migrations.read(store, uuid)
    entry, source_spec = spec_of(store, RP, uuid)
    stale = read(store, OTHER, uuid)
    migrations.answer(store, read(store, OTHER, uuid), error="no room for the image")
    assert migrations.hand_over(store, migration_entry, migration, entry, source_spec,
                                read(store, RP, uuid), stale) is None
    assert read(store, OTHER, uuid).record["error"] == "no room for the image"


def test_calling_off_and_giving_up_ask_the_destination_to_discard_then_it_is_gone():
    store = FakeStore()
    spec, request, migration = asked(store)
    uuid = spec["uuid"]
    entry, source_spec = spec_of(store, RP, uuid)
    migration, migration_entry = migrations.read(store, uuid)
    assert migrations.call_off(store, entry, source_spec, "cancelled by alice",
                               migration_entry, migration) is not None
    assert spec_of(store, RP, uuid)[1]["request"]["cancel"] == "cancelled by alice"
    migration, migration_entry = migrations.read(store, uuid)
    assert (migration["state"], migration["error"]) == ("failing", "cancelled by alice")
    there_entry, there_spec = spec_of(store, OTHER, uuid)
    assert migrations.give_up(store, migration_entry, (there_entry, there_spec),
                              "cancelled by alice") is not None
    assert migrations.read(store, uuid) == (None, None)
    there_entry, there_spec = spec_of(store, OTHER, uuid)
    assert there_spec["request"]["cancel"] == "cancelled by alice"
    assert migrations.discarded(store, there_entry, read(store, OTHER, uuid)) is not None
    assert store.get_prefix(store.keys.host(OTHER))[0] == []


def test_a_cold_move_carries_what_was_sent_and_ends_stopped_if_it_was():
    store = FakeStore()
    spec, request, migration = asked(store, live=False)
    uuid = spec["uuid"]
    entry, source_spec = spec_of(store, RP, uuid)
    action_txn.begin_action(store, source_spec, entry.mod_revision, read(store, RP, uuid))
    sent = {"files": [{"name": "disk.qcow2", "size": 5, "sha256": "0" * 64}],
            "was_running": False, "macs": ["52:54:00:00:00:01"]}
    assert migrations.migrated(store, read(store, RP, uuid), {"seconds": 3.0}, sent)
    entry, source_spec = spec_of(store, RP, uuid)
    there_entry, there_spec = spec_of(store, OTHER, uuid)
    migration, migration_entry = migrations.read(store, uuid)
    assert migrations.finish(store, there_entry, there_spec, migration_entry, migration,
                             sent) is not None
    assert spec_of(store, OTHER, uuid)[1]["request"]["moved"] == sent
    assert migrations.answer(store, read(store, OTHER, uuid), finished=True,
                             ip="192.168.1.7") is not None
    migration, migration_entry = migrations.read(store, uuid)
    assert migration["state"] == "finishing"
    # It started ACTIVE here; as it ran there (the destination started it), it ends ACTIVE.
    assert migrations.hand_over(store, migration_entry, migration, entry, source_spec,
                                read(store, RP, uuid), read(store, OTHER, uuid))
    assert read(store, OTHER, uuid).record["ip"] == "192.168.1.7"

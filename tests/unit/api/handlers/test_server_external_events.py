"""os-server-external-events: the service role's or an admin's (Nova's default); each event
for a server we have is handed to its host (a key under the host's prefix, with a lease)
and answered 200, one for a server we do not have 404, one for a server of no host 422;
all refused 404, some 207. Whatever a caller sends, nothing grows without bound."""

from __future__ import annotations

from etcd_compute import messages
from etcd_compute.instances import external_events, records
from tests.unit.api.harness import Harness

MISSING = "0b5d6c43-43f6-4c1e-9f8b-6c5a8a6f2a11"
PORT = "5f1c1c43-9b5e-4a8a-a3b3-6f0e2b1d7c11"


def booted() -> tuple[Harness, str]:
    harness = Harness.new()
    harness.add_host()
    harness.add_flavor()
    uuid = harness.boot()
    harness.activate(uuid)
    return harness, uuid


def send(harness: Harness, *events: dict, roles=("service",), project="service"):
    return harness.call("POST", "/v2.1/os-server-external-events", {"events": list(events)},
                        roles=roles, project=project)


def plugged(uuid: str, port: str = PORT, status: str = "completed") -> dict:
    return {"name": "network-vif-plugged", "server_uuid": uuid, "tag": port,
            "status": status}


def handed(harness: Harness, uuid: str):
    host = records.locate(harness.store, uuid)["host"]
    return harness.store.get(harness.store.keys.external_events(host, uuid))


def test_events_are_accepted_per_server():
    harness, uuid = booted()
    answer = send(harness, {"name": "network-changed", "server_uuid": uuid})
    assert answer.status_int == 200
    assert answer.json["events"] == [{"name": "network-changed", "server_uuid": uuid,
                                      "status": "completed", "code": 200}]
    some = send(harness, {"name": "network-changed", "server_uuid": uuid},
                {"name": "network-changed", "server_uuid": MISSING})
    assert some.status_int == 207
    assert [(e["code"], e["status"]) for e in some.json["events"]] == [
        (200, "completed"), (404, "failed")]
    assert send(harness, {"name": "network-changed", "server_uuid": MISSING}).status_int == 404
    refused = harness.call("POST", "/v2.1/os-server-external-events", {"events": [
        {"name": "power-update", "server_uuid": uuid}]}, roles=("service",))
    assert refused.status_int == 400  # from 2.76 only


def test_an_accepted_event_is_handed_to_the_servers_host_with_a_lease():
    harness, uuid = booted()
    assert handed(harness, uuid) is None
    answer = send(harness, plugged(uuid))
    assert answer.status_int == 200
    assert answer.json["events"][0]["tag"] == PORT
    entry = handed(harness, uuid)
    assert entry is not None and entry.lease in harness.store.leases
    assert harness.store.leases[entry.lease] == external_events.TTL_SECONDS
    message = messages.decode(messages.EXTERNAL_EVENTS, entry.value)
    assert message["uuid"] == uuid
    assert [(e["name"], e["status"], e["tag"]) for e in message["events"]] == [
        ("network-vif-plugged", "completed", PORT)]
    # An event nobody waits for goes with its lease.
    harness.store.expire(entry.lease)
    assert handed(harness, uuid) is None


def test_a_member_or_reader_cannot_hand_a_server_an_event_an_admin_can():
    harness, uuid = booted()
    assert send(harness, plugged(uuid), roles=("member", "reader"),
                project="p1").status_int == 403
    assert handed(harness, uuid) is None
    assert harness.admin("POST", "/v2.1/os-server-external-events", {"events": [
        plugged(uuid)]}).status_int == 200
    assert handed(harness, uuid) is not None


def test_an_event_for_a_server_of_no_host_is_422_and_written_nowhere():
    harness, uuid = booted()
    harness.add_flavor("9", "m1.wide", 1, 256, 900)  # more disk than the host has
    hostless = harness.boot("nowhere", flavorRef="9")  # no room: it failed before a claim
    assert harness.show(hostless)["status"] == "ERROR"
    answer = send(harness, plugged(hostless), plugged(uuid))
    assert answer.status_int == 207
    assert [e["code"] for e in answer.json["events"]] == [422, 200]
    entries, _ = harness.store.get_prefix(harness.store.keys.hosts())
    assert [e.key for e in entries if "/external-events/" in e.key] == [
        handed(harness, uuid).key]
    assert send(harness, plugged(hostless)).status_int == 404


def test_a_flood_of_events_keeps_only_the_last_few_of_each_server():
    harness, uuid = booted()
    for round_ in range(5):
        events = [plugged(uuid, port=f"{n:08d}-0000-4000-8000-{round_:012d}")
                  for n in range(20)]
        assert send(harness, *events).status_int == 200
    message = messages.decode(messages.EXTERNAL_EVENTS, handed(harness, uuid).value)
    assert len(message["events"]) == external_events.MAX_EVENTS
    assert message["events"][-1]["tag"] == f"{19:08d}-0000-4000-8000-{4:012d}"
    # One lease serves them all: a flood does not make a lease per event.
    assert len(harness.store.leases) <= 2


def test_a_tag_with_control_characters_is_refused_not_a_server_error():
    harness, uuid = booted()
    answer = send(harness, {**plugged(uuid), "tag": "port\x00\n\x1b[2J"})
    assert answer.status_int == 400
    assert handed(harness, uuid) is None


def test_an_instance_schedule_py_placed_gets_its_events_too():
    # Nova takes events for every instance; ours that the operator placed (no server key of
    # the API's, only its location and record) would otherwise wait out its ports' timeout.
    harness, uuid = booted()
    harness.store.delete(harness.store.keys.server(uuid))  # as schedule.py leaves it
    answer = send(harness, plugged(uuid))
    assert answer.status_int == 200, answer.text
    entry = handed(harness, uuid)
    assert entry is not None
    assert [e["tag"] for e in messages.decode(messages.EXTERNAL_EVENTS, entry.value)[
        "events"]] == [PORT]

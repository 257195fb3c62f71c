"""What other services said of an instance, handed to its host: appended while its record
is there, the last MAX_EVENTS kept, another instance's or an unreadable key's ignored, and
gone with the instance's other host keys."""

from __future__ import annotations

import time

from etcd_compute.instances import external_events as ev
from etcd_compute.instances import host as host_txn
from etcd_compute.instances import records
from tests.unit.fakes import FakeStore
from tests.unit.instances.helpers import OTHER, RP, active_one


def event(port: str, status: str = "completed", name: str = ev.VIF_PLUGGED) -> dict:
    return {"name": name, "status": status, "tag": port, "at": time.time()}


def test_events_are_appended_under_the_host_with_the_lease_given():
    store = FakeStore()
    uuid = active_one(store)["uuid"]
    lease = store.grant(ev.TTL_SECONDS)
    assert ev.hand_to_host(store, RP, uuid, [event("a")], lease)
    assert ev.hand_to_host(store, RP, uuid, [event("b"), event("c", "failed")], lease)
    assert [e["tag"] for e in ev.read(store, RP, uuid)] == ["a", "b", "c"]
    assert store.get(store.keys.external_events(RP, uuid)).lease == lease
    store.expire(lease)
    assert ev.read(store, RP, uuid) == []


def test_no_key_for_an_instance_whose_record_is_not_on_that_host():
    store = FakeStore()
    uuid = active_one(store)["uuid"]
    lease = store.grant(ev.TTL_SECONDS)
    assert not ev.hand_to_host(store, OTHER, uuid, [event("a")], lease)
    assert store.get(store.keys.external_events(OTHER, uuid)) is None


def test_only_the_last_events_are_kept():
    store = FakeStore()
    uuid = active_one(store)["uuid"]
    lease = store.grant(ev.TTL_SECONDS)
    for n in range(ev.MAX_EVENTS + 5):
        assert ev.hand_to_host(store, RP, uuid, [event(str(n))], lease)
    kept = ev.read(store, RP, uuid)
    assert [e["tag"] for e in kept] == [str(n) for n in range(5, ev.MAX_EVENTS + 5)]


def test_an_unreadable_key_or_another_instances_is_no_events_and_is_written_over():
    store = FakeStore()
    uuid = active_one(store)["uuid"]
    key = store.keys.external_events(RP, uuid)
    store.put_raw(key, "{not json")
    assert ev.read(store, RP, uuid) == []
    assert ev.decode(uuid, b'{"uuid": "' + OTHER.encode() + b'", "events": []}') == []
    assert ev.hand_to_host(store, RP, uuid, [event("a")], store.grant(60))
    assert [e["tag"] for e in ev.read(store, RP, uuid)] == ["a"]


def test_the_key_goes_with_the_instance():
    store = FakeStore()
    spec = active_one(store)
    uuid = spec["uuid"]
    assert ev.hand_to_host(store, RP, uuid, [event("a")], store.grant(60))
    host_txn.delete(store, spec, records.read_record(store, RP, uuid), ttl=60)
    assert store.get(store.keys.external_events(RP, uuid)) is None


def test_the_last_word_about_each_port_counts_and_other_events_do_not():
    events = [event("a"), event("b", "failed"), event("c", name="network-changed"),
              event("b"), event("a", "failed"), event("x")]
    assert ev.vif_plugged(events, ["a", "b", "c"]) == ({"b"}, {"a"})
    assert ev.vif_plugged([], ["a"]) == (set(), set())

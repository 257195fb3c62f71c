"""What the scheduler writes: a request's instances in one transaction, and taken back
while nobody acted on them."""

from __future__ import annotations

from etcd_compute import messages
from etcd_compute.instances import records, scheduling
from tests.support import make_spec
from tests.unit.fakes import FakeStore
from tests.unit.instances.helpers import (
    OTHER,
    RP,
    _as_read,
    build_one,
    keys_left,
    schedule_one,
)


def test_schedule_writes_spec_record_location_and_member_in_one_transaction():
    store = FakeStore()
    specs = [make_spec(RP, group={"name": "g", "policy": "anti-affinity"}) for _ in range(2)]
    revision = scheduling.schedule(store, [(s, "host-a") for s in specs])
    assert len(store.committed) == 1
    for spec in specs:
        for key in (store.keys.spec(RP, spec["uuid"]), store.keys.record(RP, spec["uuid"]),
                    store.keys.location(spec["uuid"]),
                    store.keys.group_member("g", spec["uuid"])):
            assert store.get(key).mod_revision == revision
    assert scheduling.operations(2, grouped=True) == len(store.committed[0].success) == 8


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
    assert scheduling.operations(1, grouped=False) == len(store.committed[-1].success) == 3
    assert store.get_prefix(store.keys.groups())[0] == [
        store.get(store.keys.group_member("web", grouped["uuid"]))]


def test_schedule_refuses_a_uuid_that_is_located_anywhere():
    store = FakeStore()
    spec = schedule_one(store)
    assert scheduling.schedule(store, [(spec, "host-a")]) is None
    # Even on another host, whose keys know nothing of it: the location decides.
    assert scheduling.schedule(store, [({**spec, "host": OTHER}, "host-b")]) is None
    assert store.get(store.keys.spec(OTHER, spec["uuid"])) is None


def test_schedule_refuses_when_the_group_grew_since_it_was_read():
    store = FakeStore()
    _, read_at = store.get_prefix(store.keys.group("g"))
    schedule_one(store, group={"name": "g", "policy": "anti-affinity"})
    late = make_spec(RP, group={"name": "g", "policy": "anti-affinity"})
    assert scheduling.schedule(store, [(late, "h")], group=("g", read_at)) is None
    assert records.locate(store, late["uuid"]) is None
    _, now = store.get_prefix(store.keys.group("g"))
    assert scheduling.schedule(store, [(late, "h")], group=("g", now)) is not None


def test_unschedule_takes_back_every_key_while_nobody_acted():
    store = FakeStore()
    specs = [schedule_one(store, group={"name": "g", "policy": "anti-affinity"}),
             schedule_one(store)]
    assert scheduling.unschedule(store, [_as_read(store, s) for s in specs]) is not None
    assert keys_left(store) == set()
    # Each: record, events, spec, booted, console, external events, password, location,
    # server view (and group member): one transaction.
    assert len(store.committed[-1].success) == 10 + 9


def test_unschedule_refuses_once_a_host_began_the_build():
    store = FakeStore()
    taken, untouched = build_one(store), schedule_one(store)
    before = keys_left(store)
    read = (RP, taken["uuid"], None,
            store.get(store.keys.record(RP, taken["uuid"])).mod_revision - 1,
            store.get(store.keys.spec(RP, taken["uuid"])).mod_revision)
    assert scheduling.unschedule(store, [read, _as_read(store, untouched)]) is None
    assert keys_left(store) == before  # all or nothing

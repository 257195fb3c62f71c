"""The keys an instance owns on its host and on the operator's side, and how they are let go
(remove, forget)."""

from __future__ import annotations

from etcd_compute.etcd import Delete
from etcd_compute.instances import host as host_txn
from etcd_compute.instances import moves, ownership, records
from tests.unit.fakes import FakeStore
from tests.unit.instances.helpers import (
    OTHER,
    RP,
    active_one,
    build_one,
    handed_over,
    keys_left,
    schedule_one,
)


def test_host_keys_are_the_hosts_own_keys_but_the_record():
    keys = FakeStore("/p").keys
    assert ownership.host_keys(keys, RP, "u") == [
        f"/p/hosts/{RP}/specs/u", f"/p/hosts/{RP}/booted/u", f"/p/hosts/{RP}/console/u",
        f"/p/hosts/{RP}/external-events/u", f"/p/hosts/{RP}/password/u"]
    assert all(k.startswith(keys.host(RP)) for k in ownership.host_keys(keys, RP, "u"))
    assert keys.record(RP, "u") not in ownership.host_keys(keys, RP, "u")


def test_operator_keys_are_the_location_the_api_view_and_the_group_member():
    keys = FakeStore("/p").keys
    assert ownership.operator_keys(keys, "u", "g") == ["/p/instances/u", "/p/servers/u",
                                                       "/p/groups/g/u"]
    assert ownership.operator_keys(keys, "u", None) == ["/p/instances/u", "/p/servers/u"]
    assert not any(k.startswith(keys.hosts()) for k in ownership.operator_keys(keys, "u", "g"))


def test_remove_forgets_every_key_on_both_sides():
    store = FakeStore()
    spec = schedule_one(store, group={"name": "g", "policy": "affinity"})
    kept = schedule_one(store, group={"name": "g", "policy": "affinity"})
    host_txn.fail(store, spec, records.read_record(store, RP, spec["uuid"]), "x")
    store.put_raw(store.keys.booted(RP, spec["uuid"]), "10.0.0.2")  # a leftover goes too
    assert ownership.remove(store, spec["uuid"], RP, "g") is not None
    assert all(isinstance(op, Delete) for op in store.committed[-1].success)
    assert not any(spec["uuid"] in key for key in keys_left(store))
    assert records.locate(store, kept["uuid"])["host"] == RP  # another instance stays


def test_remove_without_a_host_forgets_the_operators_keys_only():
    store = FakeStore()
    spec = schedule_one(store, group={"name": "g", "policy": "affinity"})
    assert ownership.remove(store, spec["uuid"], None, "g") is not None
    assert [op.key for op in store.committed[-1].success] == ownership.operator_keys(
        store.keys, spec["uuid"], "g")
    assert keys_left(store) == {store.keys.spec(RP, spec["uuid"]),
                                store.keys.record(RP, spec["uuid"])}


def test_forget_drops_location_and_member_once_the_host_kept_nothing():
    store = FakeStore()
    spec = schedule_one(store, group={"name": "g", "policy": "affinity"})
    other = schedule_one(store)
    # While the host still has the record or the spec, nothing is forgotten.
    assert ownership.forget(store, spec["uuid"], RP, "g") is None
    store.delete(store.keys.record(RP, spec["uuid"]))
    assert ownership.forget(store, spec["uuid"], RP, "g") is None  # the spec is still there
    store.put_raw(store.keys.record(RP, spec["uuid"]), "{}")
    store.delete(store.keys.spec(RP, spec["uuid"]))
    assert ownership.forget(store, spec["uuid"], RP, "g") is None  # the record is back
    store.delete(store.keys.record(RP, spec["uuid"]))
    assert ownership.forget(store, spec["uuid"], RP, "g") is not None
    assert records.locate(store, spec["uuid"]) is None
    assert store.get(store.keys.group_member("g", spec["uuid"])) is None
    assert records.locate(store, other["uuid"])["host"] == RP


def test_forget_of_an_ungrouped_instance_drops_its_location():
    store = FakeStore()
    spec = schedule_one(store)
    store.delete(store.keys.spec(RP, spec["uuid"]))
    store.delete(store.keys.record(RP, spec["uuid"]))
    assert ownership.forget(store, spec["uuid"], RP, None) is not None
    assert [op.key for op in store.committed[-1].success] == [store.keys.location(spec["uuid"]),
                                                              store.keys.server(spec["uuid"])]
    assert keys_left(store) == set()


def test_forget_leaves_an_instance_that_moved_meanwhile():
    store = FakeStore()
    spec = handed_over(store, group={"name": "g", "policy": "anti-affinity"})
    stale_location = records.locate(store, spec["uuid"])  # a reader saw: on RP
    moves.move(store, spec, records.read_record(store, RP, spec["uuid"]), OTHER,
                   {OTHER: {"resources": spec["resources"]}}, [])
    # The reader finds nothing on RP any more and forgets: it must not touch the moved one.
    assert ownership.forget(store, spec["uuid"], stale_location["host"], "g") is None
    assert records.locate(store, spec["uuid"])["host"] == OTHER
    assert store.get(store.keys.group_member("g", spec["uuid"])) is not None


# --- every key of a destroyed instance ends with its DELETED record -------------------------


def destroyed_one(store: FakeStore, **extra) -> dict:
    """An ACTIVE instance of RP destroyed by its host: DELETED, record on a lease."""
    spec = active_one(store, **extra)
    assert host_txn.delete(store, spec, records.read_record(store, RP, spec["uuid"]),
                           60) is not None
    return spec


def test_the_operators_keys_of_a_deleted_instance_expire_with_its_record():
    store = FakeStore()
    spec = destroyed_one(store, group={"name": "g", "policy": "affinity"})
    kept = schedule_one(store, group={"name": "g", "policy": "affinity"})
    lease = store.get(store.keys.record(RP, spec["uuid"])).lease
    assert lease and store.get(store.keys.location(spec["uuid"])).lease == 0
    assert ownership.expire_with_record(store, spec["uuid"]) is not None
    assert store.get(store.keys.location(spec["uuid"])).lease == lease
    assert store.get(store.keys.group_member("g", spec["uuid"])).lease == lease
    assert records.locate(store, spec["uuid"])["host"] == RP  # still readable meanwhile
    assert ownership.expire_with_record(store, spec["uuid"]) is None  # done already
    store.expire(lease)
    assert not any(spec["uuid"] in key for key in keys_left(store))
    assert records.locate(store, kept["uuid"])["host"] == RP


def test_only_a_deleted_record_lends_its_lease():
    store = FakeStore()
    live = active_one(store)
    failed = build_one(store)
    host_txn.fail(store, failed, records.read_record(store, RP, failed["uuid"]), "x")
    assert ownership.expire_with_record(store, live["uuid"]) is None
    assert ownership.expire_with_record(store, failed["uuid"]) is None  # ERROR: no lease
    assert ownership.expire_with_record(store, "no-such-instance") is None
    assert store.get(store.keys.location(live["uuid"])).lease == 0


def test_a_location_that_changed_meanwhile_is_not_bound():
    store = FakeStore()
    spec = destroyed_one(store)
    entry = store.get(store.keys.location(spec["uuid"]))
    real_get = store.get

    def moved_meanwhile(key: str):
        found = real_get(key)
        if key == store.keys.record(RP, spec["uuid"]):
            store.put_raw(entry.key, entry.value)  # rewritten after it was read
        return found

    store.get = moved_meanwhile  # type: ignore[method-assign]
    assert ownership.expire_with_record(store, spec["uuid"]) is None
    store.get = real_get  # type: ignore[method-assign]
    assert store.get(entry.key).lease == 0

"""Taking instances back as if never placed: unscheduled while nobody acted on them, destroyed
through their host once one did, claims freed only for what was taken back here."""

from __future__ import annotations

from etcd_compute import messages
from etcd_compute.instances import host as host_txn
from etcd_compute.instances import records
from etcd_compute.ops.take_back import take_back, unwrite
from etcd_compute.scheduler import RequestSpec
from tests.unit.fakes import FakePlacement, FakeStore
from tests.unit.scheduler.test_scheduler import add_host, make_scheduler

QUERY = "resources=VCPU:1,MEMORY_MB:256,DISK_GB:1"


def placed(count: int = 2):
    store, placement = FakeStore("/t"), FakePlacement()
    add_host(placement, store, "h")
    scheduler = make_scheduler(store, placement)
    destinations = scheduler.select_destinations(RequestSpec.build(QUERY, count=count))
    return store, placement, destinations


def test_scheduled_instances_go_as_if_never_written_and_their_claims_are_freed():
    store, placement, destinations = placed()
    done = take_back(store, placement, [d.uuid for d in destinations], 128)
    assert sorted(done.taken_back) == sorted(d.uuid for d in destinations)
    assert done.destroyed == done.left == []
    entries, _ = store.get_prefix("/t/", keys_only=True)
    assert [e.key for e in entries if "/alive/" not in e.key] == []
    assert placement.consumers == {}


def test_one_its_host_took_is_destroyed_through_it_and_keeps_its_claim_for_the_host():
    store, placement, destinations = placed()
    first = destinations[0]
    entry = store.get(store.keys.spec(first.host, first.uuid))
    spec = messages.decode(messages.INSTANCE_SPEC, entry.value)
    assert host_txn.begin_build(store, spec, entry.mod_revision,
                                 records.read_record(store, first.host, first.uuid),
                                 "h") is not None
    done = take_back(store, placement, [d.uuid for d in destinations], 128)
    assert (done.taken_back, done.destroyed) == ([destinations[1].uuid], [first.uuid])
    now, _ = store.read(messages.INSTANCE_SPEC, store.keys.spec(first.host, first.uuid))
    assert now["action"] == "destroy"
    assert list(placement.consumers) == [first.uuid]  # its host frees it


def test_what_was_never_written_counts_as_taken_back():
    store, placement, _ = placed(1)
    ghost = "00000000-0000-4000-8000-0000000000ff"
    assert unwrite(store, placement, [ghost], 128).taken_back == [ghost]

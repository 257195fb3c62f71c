"""The controller's decisions against the in-memory store and Placement."""

from __future__ import annotations

import uuid as uuidlib

from etcd_compute import instances, messages
from etcd_compute.scheduler.controller import Controller
from tests.support import make_spec
from tests.unit.fakes import FakePlacement, FakeStore

INVENTORY = {"VCPU": {"total": 4}, "MEMORY_MB": {"total": 1024}, "DISK_GB": {"total": 10}}


class Cluster:
    def __init__(self) -> None:
        self.store, self.placement = FakeStore(), FakePlacement()
        self.controller = Controller(self.store, self.placement)

    def host(self, alive: bool = True, capacity: int = 4) -> str:
        rp = str(uuidlib.uuid4())
        self.placement.ensure_provider(rp, rp[:8])
        self.placement.set_inventory(rp, {**INVENTORY, "VCPU": {"total": capacity}})
        if alive:
            self.store.put(messages.ALIVE, self.store.keys.alive(rp),
                           {"host": rp, "name": rp[:8], "since": 1.0})
        return rp

    def failed_build(self, host: str, alternates: list[str], **extra) -> dict:
        """An instance whose build failed on `host`, handed over (RESCHEDULING)."""
        spec = make_spec(host, **extra)
        spec["alternates"] = [{"host": a, "allocations": {a: {"resources": spec["resources"]}}}
                              for a in alternates]
        self.placement.claim(spec["uuid"], spec["allocations"], "p", "u")
        instances.schedule(self.store, [(spec, "h")])
        entry = self.store.get(self.store.keys.spec(host, spec["uuid"]))
        instances.begin_build(self.store, spec, entry.mod_revision, self.read(host, spec), "h")
        instances.hand_over(self.store, spec, self.read(host, spec), "disk on fire")
        return spec

    def read(self, host: str, spec: dict) -> instances.RecordRead:
        return instances.read_record(self.store, host, spec["uuid"])


def test_a_failed_build_moves_to_the_first_live_alternate_with_room():
    cluster = Cluster()
    here, dead, full, good, spare = (cluster.host(), cluster.host(alive=False),
                                     cluster.host(capacity=0), cluster.host(), cluster.host())
    spec = cluster.failed_build(here, [dead, full, good, spare],
                                group={"name": "g", "policy": "anti-affinity"})
    cluster.controller.on_record(here, spec["uuid"])
    moved = cluster.read(good, spec)
    assert (moved.state, moved.record["error"]) == ("SCHEDULED", None)
    assert set(cluster.placement.get_allocations(spec["uuid"])["allocations"]) == {good}
    new_spec, _ = cluster.store.read(messages.INSTANCE_SPEC,
                                     cluster.store.keys.spec(good, spec["uuid"]))
    assert [a["host"] for a in new_spec["alternates"]] == [spare]
    assert instances.locate(cluster.store, spec["uuid"])["host"] == good
    member, _ = cluster.store.read(messages.GROUP_MEMBER,
                                   cluster.store.keys.group_member("g", spec["uuid"]))
    assert member["host"] == good
    assert cluster.store.get_prefix(cluster.store.keys.host(here))[0] == []


def test_no_alternate_that_takes_it_is_error_with_the_claim_freed():
    cluster = Cluster()
    here, dead = cluster.host(), cluster.host(alive=False)
    spec = cluster.failed_build(here, [dead])
    cluster.controller.on_record(here, spec["uuid"])
    record = cluster.read(here, spec).record
    assert (record["state"], record["error"]) == (
        "ERROR", "disk on fire; no alternate host would take it")
    assert cluster.placement.get_allocations(spec["uuid"])["allocations"] == {}
    assert cluster.store.get(cluster.store.keys.spec(here, spec["uuid"])) is None


def test_a_destroy_that_got_in_first_is_left_to_the_host():
    cluster = Cluster()
    here, good = cluster.host(), cluster.host()
    spec = cluster.failed_build(here, [good])
    entry = cluster.store.get(cluster.store.keys.spec(here, spec["uuid"]))
    instances.request_destroy(cluster.store, entry, spec)
    cluster.controller.on_record(here, spec["uuid"])
    assert cluster.read(here, spec).state == "RESCHEDULING"
    assert set(cluster.placement.get_allocations(spec["uuid"])["allocations"]) == {here}


def test_records_in_other_states_are_left_alone():
    cluster = Cluster()
    here = cluster.host()
    spec = make_spec(here)
    instances.schedule(cluster.store, [(spec, "h")])
    writes = len(cluster.store.committed)
    cluster.controller.on_record(here, spec["uuid"])
    assert len(cluster.store.committed) == writes


def test_the_keys_of_an_instance_whose_record_expired_are_forgotten():
    cluster = Cluster()
    here = cluster.host()
    spec = make_spec(here, group={"name": "g", "policy": "affinity"})
    instances.schedule(cluster.store, [(spec, "h")])
    instances.delete(cluster.store, spec, cluster.read(here, spec), ttl=60)
    record_lease = cluster.store.get(cluster.store.keys.record(here, spec["uuid"])).lease
    cluster.store.expire(record_lease)
    cluster.controller.on_record_gone(here, spec["uuid"])
    assert instances.locate(cluster.store, spec["uuid"]) is None
    assert cluster.store.get(cluster.store.keys.group_member("g", spec["uuid"])) is None


def test_sweep_reschedules_and_forgets_everything_pending():
    cluster = Cluster()
    here, good = cluster.host(), cluster.host()
    pending = cluster.failed_build(here, [good])
    ended = make_spec(here)
    instances.schedule(cluster.store, [(ended, "h")])
    cluster.store.delete(cluster.store.keys.record(here, ended["uuid"]))
    cluster.store.delete(cluster.store.keys.spec(here, ended["uuid"]))
    summary = cluster.controller.sweep()
    assert summary == {"records": 1, "rescheduled": 1, "forgotten": 1}
    assert cluster.read(good, pending).state == "SCHEDULED"
    assert instances.locate(cluster.store, ended["uuid"]) is None

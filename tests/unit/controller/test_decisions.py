"""The controller's decisions against the in-memory store and Placement."""

from __future__ import annotations

import uuid as uuidlib

from etcd_compute import messages
from etcd_compute.controller.decisions import Controller
from etcd_compute.instances import actions as action_txn
from etcd_compute.instances import host as host_txn
from etcd_compute.instances import moves, records, scheduling
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
        scheduling.schedule(self.store, [(spec, "h")])
        entry = self.store.get(self.store.keys.spec(host, spec["uuid"]))
        host_txn.begin_build(self.store, spec, entry.mod_revision, self.read(host, spec), "h")
        host_txn.hand_over(self.store, spec, self.read(host, spec), "disk on fire")
        return spec

    def read(self, host: str, spec: dict) -> records.RecordRead:
        return records.read_record(self.store, host, spec["uuid"])


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
    assert records.locate(cluster.store, spec["uuid"])["host"] == good
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


def test_a_drained_instance_goes_where_the_scheduler_says_not_to_its_old_alternates():
    cluster = Cluster()
    here, old_alternate, now_best = cluster.host(), cluster.host(), cluster.host()
    spec = make_spec(here, alternates=[{"host": old_alternate, "allocations": {
        old_alternate: {"resources": make_spec(here)["resources"]}}}])
    cluster.placement.claim(spec["uuid"], spec["allocations"], "p", "u")
    scheduling.schedule(cluster.store, [(spec, "h")])
    entry = cluster.store.get(cluster.store.keys.spec(here, spec["uuid"]))
    host_txn.begin_build(cluster.store, spec, entry.mod_revision, cluster.read(here, spec), "h")
    host_txn.activate(cluster.store, cluster.read(here, spec), "10.0.0.9")
    entry = cluster.store.get(cluster.store.keys.spec(here, spec["uuid"]))
    action_txn.request_evacuate(cluster.store, entry, spec)
    evacuated = {**spec, "action": "evacuate"}
    host_txn.hand_over(cluster.store, evacuated, cluster.read(here, spec), "evacuated (drain)")
    cluster.controller.place = _placer(now_best)
    cluster.controller.on_record(here, spec["uuid"])
    assert cluster.read(now_best, spec).state == "SCHEDULED"
    new_spec, _ = cluster.store.read(messages.INSTANCE_SPEC,
                                     cluster.store.keys.spec(now_best, spec["uuid"]))
    assert new_spec["action"] == "build"
    assert set(cluster.placement.get_allocations(spec["uuid"])["allocations"]) == {now_best}


def test_a_destroy_that_got_in_first_is_left_to_the_host():
    cluster = Cluster()
    here, good = cluster.host(), cluster.host()
    spec = cluster.failed_build(here, [good])
    entry = cluster.store.get(cluster.store.keys.spec(here, spec["uuid"]))
    action_txn.request_destroy(cluster.store, entry, spec)
    cluster.controller.on_record(here, spec["uuid"])
    assert cluster.read(here, spec).state == "RESCHEDULING"
    assert set(cluster.placement.get_allocations(spec["uuid"])["allocations"]) == {here}


def test_records_in_other_states_are_left_alone():
    cluster = Cluster()
    here = cluster.host()
    spec = make_spec(here)
    scheduling.schedule(cluster.store, [(spec, "h")])
    writes = len(cluster.store.committed)
    cluster.controller.on_record(here, spec["uuid"])
    assert len(cluster.store.committed) == writes


def test_the_keys_of_an_instance_whose_record_expired_are_forgotten():
    cluster = Cluster()
    here = cluster.host()
    spec = make_spec(here, group={"name": "g", "policy": "affinity"})
    scheduling.schedule(cluster.store, [(spec, "h")])
    host_txn.delete(cluster.store, spec, cluster.read(here, spec), ttl=60)
    record_lease = cluster.store.get(cluster.store.keys.record(here, spec["uuid"])).lease
    cluster.store.expire(record_lease)
    cluster.controller.on_record_gone(here, spec["uuid"])
    assert records.locate(cluster.store, spec["uuid"]) is None
    assert cluster.store.get(cluster.store.keys.group_member("g", spec["uuid"])) is None


def test_sweep_reschedules_and_forgets_everything_pending():
    cluster = Cluster()
    here, good = cluster.host(), cluster.host()
    pending = cluster.failed_build(here, [good])
    ended = make_spec(here)
    scheduling.schedule(cluster.store, [(ended, "h")])
    cluster.store.delete(cluster.store.keys.record(here, ended["uuid"]))
    cluster.store.delete(cluster.store.keys.spec(here, ended["uuid"]))
    summary = cluster.controller.sweep()
    assert summary == {"records": 1, "rescheduled": 1, "forgotten": 1, "hosts_down": 0}
    assert cluster.read(good, pending).state == "SCHEDULED"
    assert records.locate(cluster.store, ended["uuid"]) is None


def test_a_deleted_record_takes_the_operators_keys_with_it():
    cluster = Cluster()
    here = cluster.host()
    spec = make_spec(here, group={"name": "g", "policy": "anti-affinity"})
    swept = make_spec(here)
    for each in (spec, swept):
        scheduling.schedule(cluster.store, [(each, "h")])
        host_txn.delete(cluster.store, each, cluster.read(here, each), 60)  # destroyed there
    cluster.controller.on_record(here, spec["uuid"])  # the watch saw it DELETED
    cluster.controller.sweep()  # or a new leader found it
    for each in (spec, swept):
        lease = cluster.store.get(cluster.store.keys.record(here, each["uuid"])).lease
        assert cluster.store.get(cluster.store.keys.location(each["uuid"])).lease == lease
        cluster.store.expire(lease)  # and the controller gone: nothing is left anyway
        assert not [e.key for e in cluster.store.get_prefix("")[0] if each["uuid"] in e.key]


# --- dead hosts -------------------------------------------------------------------------


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def dead_host_cluster(policy: str = "rebuild", place_on: str | None = None, fencing=None):
    """A cluster whose host `here` holds an ACTIVE instance and then loses its heartbeat."""
    from etcd_compute.errors import NoValidHost
    from etcd_compute.scheduler.hoststate import HostState, ProviderUsage
    from etcd_compute.scheduler.planner import Pick

    cluster = Cluster()
    here, there = cluster.host(), cluster.host()
    clock = Clock()

    def place(spec: dict, exclude: frozenset[str]) -> Pick:
        assert here in exclude
        if place_on is None:
            raise NoValidHost(["resources=VCPU:1: no resource provider has 1 VCPU free"])
        host = HostState(uuid=place_on, name="there", usage=ProviderUsage({}))
        return Pick(host, {place_on: {"resources": spec["resources"]}}, [])

    cluster.controller = Controller(cluster.store, cluster.placement,
                                    {"host_failure_grace_seconds": 10,
                                     "on_host_failure": "rebuild"}, place=place, clock=clock,
                                    fencing=fencing)
    spec = make_spec(here, on_host_failure=policy, group={"name": "g", "policy": "affinity"})
    cluster.placement.claim(spec["uuid"], spec["allocations"], "p", "u")
    scheduling.schedule(cluster.store, [(spec, "h")])
    entry = cluster.store.get(cluster.store.keys.spec(here, spec["uuid"]))
    host_txn.begin_build(cluster.store, spec, entry.mod_revision, cluster.read(here, spec), "h")
    host_txn.activate(cluster.store, cluster.read(here, spec), "10.0.0.9")
    cluster.store.delete(cluster.store.keys.alive(here))
    cluster.controller.on_alive(here, False)
    return cluster, clock, here, there, spec


def test_nothing_happens_before_the_grace_period():
    cluster, clock, here, there, spec = dead_host_cluster(place_on=None)
    clock.now += 9.9
    assert cluster.controller.recover_due() == []
    assert cluster.read(here, spec).state == "ACTIVE"


def test_a_host_back_within_the_grace_period_keeps_its_instances():
    cluster, clock, here, there, spec = dead_host_cluster(place_on=None)
    cluster.store.put(messages.ALIVE, cluster.store.keys.alive(here),
                      {"host": here, "name": "h", "since": 1.0})
    cluster.controller.on_alive(here, True)
    clock.now += 60
    assert cluster.controller.recover_due() == []
    assert cluster.read(here, spec).state == "ACTIVE"


def test_rebuild_moves_claim_spec_record_location_and_member_to_another_host():
    cluster, clock, here, there, spec = dead_host_cluster(place_on="")
    cluster.controller.place = _placer(there)
    clock.now += 10
    assert cluster.controller.recover_due() == [here]
    moved = cluster.read(there, spec)
    assert (moved.state, moved.record["ip"]) == ("SCHEDULED", None)
    new_spec, _ = cluster.store.read(messages.INSTANCE_SPEC,
                                     cluster.store.keys.spec(there, spec["uuid"]))
    assert new_spec["action"] == "build" and new_spec["host"] == there
    assert set(cluster.placement.get_allocations(spec["uuid"])["allocations"]) == {there}
    assert records.locate(cluster.store, spec["uuid"])["host"] == there
    member, _ = cluster.store.read(messages.GROUP_MEMBER,
                                   cluster.store.keys.group_member("g", spec["uuid"]))
    assert member["host"] == there
    assert cluster.store.get_prefix(cluster.store.keys.host(here))[0] == []


def _placer(target: str):
    from etcd_compute.scheduler.hoststate import HostState, ProviderUsage
    from etcd_compute.scheduler.planner import Pick

    def place(spec: dict, exclude: frozenset[str]) -> Pick:
        host = HostState(uuid=target, name="there", usage=ProviderUsage({}))
        return Pick(host, {target: {"resources": spec["resources"]}}, [])

    return place


def test_the_error_policy_ends_in_error_with_the_claim_freed():
    cluster, clock, here, there, spec = dead_host_cluster(policy="error", place_on=None)
    clock.now += 10
    cluster.controller.recover_due()
    record = cluster.read(here, spec).record
    assert (record["state"], record["error"]) == ("ERROR", f"host {here} is down")
    assert cluster.placement.get_allocations(spec["uuid"])["allocations"] == {}


def test_no_other_host_with_room_is_error_naming_why():
    cluster, clock, here, there, spec = dead_host_cluster(place_on=None)
    clock.now += 10
    cluster.controller.recover_due()
    record = cluster.read(here, spec).record
    assert record["state"] == "ERROR"
    assert "no other host can take it (resources=VCPU:1: no resource provider" in record["error"]
    assert cluster.placement.get_allocations(spec["uuid"])["allocations"] == {}


def test_a_host_back_just_before_the_move_keeps_its_instance_and_its_claim():
    cluster, clock, here, there, spec = dead_host_cluster(place_on="")
    placed = _placer(there)

    def back_while_placing(spec_: dict, exclude: frozenset[str]):
        cluster.store.put(messages.ALIVE, cluster.store.keys.alive(here),
                          {"host": here, "name": "h", "since": 1.0})
        return placed(spec_, exclude)

    cluster.controller.place = back_while_placing
    clock.now += 10
    cluster.controller.recover_due()
    assert cluster.read(here, spec).state == "ACTIVE"
    assert set(cluster.placement.get_allocations(spec["uuid"])["allocations"]) == {here}
    assert cluster.store.get(cluster.store.keys.spec(there, spec["uuid"])) is None


def test_a_destroy_asked_of_the_dead_host_is_finished_here():
    cluster, clock, here, there, spec = dead_host_cluster(place_on=None)
    entry = cluster.store.get(cluster.store.keys.spec(here, spec["uuid"]))
    action_txn.request_destroy(cluster.store, entry, spec)
    clock.now += 10
    cluster.controller.recover_due()
    assert cluster.read(here, spec).state == "DELETED"
    assert cluster.placement.get_allocations(spec["uuid"])["allocations"] == {}


def test_sweep_counts_hosts_with_instances_and_no_heartbeat_as_down():
    cluster, clock, here, there, spec = dead_host_cluster(place_on=None)
    fresh = Controller(cluster.store, cluster.placement, {"host_failure_grace_seconds": 10},
                       clock=clock)
    assert fresh.sweep()["hosts_down"] == 1 and here in fresh.down_since


# --- races with a destroy -----------------------------------------------------------------


def _placer_that_first(target: str, meanwhile):
    """A place() that lets `meanwhile` happen before the controller's own moves."""
    place = _placer(target)

    def racing(spec: dict, exclude: frozenset[str]):
        meanwhile(spec)
        return place(spec, exclude)

    return racing


def test_a_destroy_finished_during_a_rebuild_does_not_bring_its_claim_back():
    from etcd_compute.ops import operations

    cluster, clock, here, there, spec = dead_host_cluster(place_on="")
    cluster.controller.place = _placer_that_first(
        there, lambda _spec: operations.destroy(cluster.store, cluster.placement, spec["uuid"]))
    clock.now += 10
    cluster.controller.recover_due()
    assert cluster.read(here, spec).state == "DELETED"
    assert cluster.read(there, spec).record is None
    assert cluster.placement.get_allocations(spec["uuid"])["allocations"] == {}


def test_a_destroy_asked_during_a_reschedule_is_not_moved_away():
    cluster = Cluster()
    here, there = cluster.host(), cluster.host()
    spec = cluster.failed_build(here, [])

    def destroy_requested(_spec: dict) -> None:
        entry = cluster.store.get(cluster.store.keys.spec(here, spec["uuid"]))
        action_txn.request_destroy(cluster.store, entry, spec)

    cluster.controller.place = _placer_that_first(there, destroy_requested)
    assert cluster.controller.reschedule(here, spec["uuid"], cluster.read(here, spec)) is None
    kept, _ = cluster.store.read(messages.INSTANCE_SPEC,
                                 cluster.store.keys.spec(here, spec["uuid"]))
    assert kept["action"] == "destroy"
    assert cluster.read(there, spec).record is None
    # The claim went back where the instance still is (its host frees it when destroyed).
    assert set(cluster.placement.get_allocations(spec["uuid"])["allocations"]) == {here}


def test_a_destroy_that_lost_the_race_to_a_rebuild_leaves_the_moved_claim_alone():
    cluster, clock, here, there, spec = dead_host_cluster(place_on="")
    cluster.controller.place = _placer(there)
    read = cluster.read(here, spec)  # what a destroy on the dead host read first
    clock.now += 10
    cluster.controller.recover_due()
    assert moves.finish_destroy_on_dead_host(cluster.store, spec, read, 60) is None
    assert set(cluster.placement.get_allocations(spec["uuid"])["allocations"]) == {there}


# --- a dead host's instances, together ---------------------------------------------------


def dead_host_with(count: int, place_many=None, capacity: int = 16):
    """`count` ACTIVE instances on a host that then died; the controller past its grace."""
    cluster = Cluster()
    here, there = cluster.host(capacity=capacity), cluster.host(capacity=capacity)
    clock = Clock()
    cluster.controller = Controller(cluster.store, cluster.placement,
                                    {"host_failure_grace_seconds": 10,
                                     "on_host_failure": "rebuild", "etcd_max_txn_ops": 4096},
                                    place=_placer(there), clock=clock, place_many=place_many)
    specs = []
    for _ in range(count):
        spec = make_spec(here, on_host_failure="rebuild")
        cluster.placement.claim(spec["uuid"], spec["allocations"], "p", "u")
        scheduling.schedule(cluster.store, [(spec, "h")])
        entry = cluster.store.get(cluster.store.keys.spec(here, spec["uuid"]))
        host_txn.begin_build(cluster.store, spec, entry.mod_revision, cluster.read(here, spec),
                             "h")
        host_txn.activate(cluster.store, cluster.read(here, spec), "10.0.0.9")
        specs.append(spec)
    cluster.store.delete(cluster.store.keys.alive(here))
    cluster.controller.on_alive(here, False)
    clock.now += 10
    return cluster, here, there, specs


def planned_on(target: str, asked: list):
    from etcd_compute.scheduler.hoststate import HostState, ProviderUsage
    from etcd_compute.scheduler.planner import Pick

    def place_many(specs: list[dict], exclude: frozenset[str]) -> dict:
        asked.append((len(specs), exclude))
        host = HostState(uuid=target, name="there", usage=ProviderUsage({}))
        return {spec["uuid"]: Pick(host, {target: {"resources": spec["resources"]}}, [])
                for spec in specs}

    return place_many


def test_a_dead_hosts_instances_are_planned_claimed_and_moved_together():
    """N instances: one plan, one claim move, one transaction (it was N of each)."""
    asked: list = []
    cluster, here, there, specs = dead_host_with(5)
    cluster.controller.place_many = planned_on(there, asked)
    calls, commits = len(cluster.placement.calls), len(cluster.store.committed)
    assert cluster.controller.recover_due() == [here]
    assert asked == [(5, frozenset({here}))]
    claims_made = [c for c in cluster.placement.calls[calls:] if not c.startswith("get")]
    assert claims_made == ["replace_many 5"]
    assert len(cluster.store.committed) - commits == 1
    for spec in specs:
        assert cluster.read(there, spec).state == "SCHEDULED"
        assert set(cluster.placement.get_allocations(spec["uuid"])["allocations"]) == {there}
    assert cluster.store.get_prefix(cluster.store.keys.host(here))[0] == []


def test_one_that_changed_meanwhile_sends_each_on_its_own_and_keeps_exactly_once():
    asked: list = []
    cluster, here, there, specs = dead_host_with(3)
    cluster.controller.place_many = planned_on(there, asked)
    real_commit = cluster.store.commit
    destroyed = specs[1]

    def destroy_first(txn):  # an operator's destroy gets in between the plan and the write
        if len(txn.compare) > 3 and cluster.store.get(
                cluster.store.keys.spec(here, destroyed["uuid"])) is not None:
            entry = cluster.store.get(cluster.store.keys.spec(here, destroyed["uuid"]))
            spec = messages.decode(messages.INSTANCE_SPEC, entry.value)
            action_txn.request_destroy(cluster.store, entry, spec, "op")
        return real_commit(txn)

    cluster.store.commit = destroy_first
    cluster.controller.recover_due()
    for spec in (specs[0], specs[2]):
        assert cluster.read(there, spec).state == "SCHEDULED"
        assert set(cluster.placement.get_allocations(spec["uuid"])["allocations"]) == {there}
    # The destroyed one stays where it was, its claim back on the dead host (a later tick
    # finishes the destroy there).
    assert cluster.read(here, destroyed).state == "ACTIVE"
    assert set(cluster.placement.get_allocations(destroyed["uuid"])["allocations"]) == {here}


def test_a_claim_move_that_loses_a_race_goes_one_by_one():
    asked: list = []
    cluster, here, there, specs = dead_host_with(3)
    cluster.controller.place_many = planned_on(there, asked)
    real = cluster.placement.replace_many

    def lose(claims, consumer_type="INSTANCE"):
        raise cluster.placement._conflict("someone else", "placement.concurrent_update")

    cluster.placement.replace_many = lose
    cluster.controller.recover_due()
    cluster.placement.replace_many = real
    for spec in specs:
        assert cluster.read(there, spec).state == "SCHEDULED"


def test_what_fits_nowhere_ends_in_error_and_the_rest_moves():
    from etcd_compute.errors import NoValidHost

    asked: list = []
    cluster, here, there, specs = dead_host_with(3)
    moving = planned_on(there, asked)

    def some_fit(spec_list, exclude):
        placed = moving(spec_list, exclude)
        placed[specs[0]["uuid"]] = NoValidHost(["no room for it"])
        return placed

    cluster.controller.place_many = some_fit
    cluster.controller.recover_due()
    failed = cluster.read(here, specs[0])
    assert failed.state == "ERROR" and "no room for it" in failed.record["error"]
    assert cluster.placement.get_allocations(specs[0]["uuid"])["allocations"] == {}
    assert all(cluster.read(there, spec).state == "SCHEDULED" for spec in specs[1:])



# --- fencing a dead host first ---------------------------------------------------------------


class FakeFencing:
    """Stands in for controller/fencing.py: records what it was asked, says what it is told."""

    enabled = True

    def __init__(self) -> None:
        self.asked: list[tuple] = []
        self.verdicts: dict = {}
        self.forgotten: list[str] = []

    def begin(self, host, name, address, uuids, on_done=None) -> None:
        self.asked.append((host, name, address, uuids))

    def verdict(self, host):
        return self.verdicts.get(host)

    def forget(self, host) -> None:
        self.forgotten.append(host)
        self.verdicts.pop(host, None)


def recover_event(cluster, host: str, spec: dict) -> dict:
    from etcd_compute import events

    return [e for e in events.read(cluster.store, host, spec["uuid"])
            if e["action"] == "recover"][-1]


def test_a_dead_host_is_fenced_with_its_running_instances_where_its_libvirtd_is():
    from etcd_compute import hosts

    fencing = FakeFencing()
    cluster = Cluster()
    here = cluster.host()
    hosts.publish_libvirt_address(cluster.store, here, "10.0.0.5")
    spec = make_spec(here)
    scheduling.schedule(cluster.store, [(spec, "host-a")])
    entry = cluster.store.get(cluster.store.keys.spec(here, spec["uuid"]))
    host_txn.begin_build(cluster.store, spec, entry.mod_revision, cluster.read(here, spec),
                         "host-a")
    host_txn.activate(cluster.store, cluster.read(here, spec), "10.0.0.9")
    controller = Controller(cluster.store, cluster.placement, {}, fencing=fencing)
    controller.on_alive(here, False)
    controller.on_alive(here, False)  # again: once
    assert fencing.asked == [(here, "host-a", "10.0.0.5", [spec["uuid"]])]
    controller.on_alive(here, True)
    assert fencing.forgotten == [here]


def test_a_fenced_host_is_recovered_at_once_and_its_instances_say_how():
    from etcd_compute.controller.fencing import Verdict
    from etcd_compute.controller.metrics import HOSTS_RECOVERED

    fencing = FakeFencing()
    cluster, clock, here, there, spec = dead_host_cluster(place_on=None, fencing=fencing)
    cluster.controller.place = _placer(there)
    assert fencing.asked and cluster.controller.recover_due() == []  # still fencing
    before = HOSTS_RECOVERED.labels("libvirt")._value.get()
    fencing.verdicts[here] = Verdict(True, "libvirt", "1 guest(s) destroyed through its "
                                                      "libvirtd", 0.8)
    clock.now += 1  # well within the grace period
    assert cluster.controller.recover_due() == [here]
    assert cluster.read(there, spec).state == "SCHEDULED"
    event = recover_event(cluster, there, spec)
    assert event["detail"] == (f"placed on {there}; its host fenced (1 guest(s) destroyed "
                               "through its libvirtd) after 0.8 s")
    assert HOSTS_RECOVERED.labels("libvirt")._value.get() == before + 1
    assert fencing.forgotten == [here]


def test_a_host_no_fence_reached_is_recovered_after_the_grace_period_saying_why():
    from etcd_compute.controller.fencing import Verdict
    from etcd_compute.controller.metrics import HOSTS_RECOVERED

    fencing = FakeFencing()
    cluster, clock, here, there, spec = dead_host_cluster(place_on=None, fencing=fencing)
    cluster.controller.place = _placer(there)
    fencing.verdicts[here] = Verdict(False, "libvirt", "libvirt: no answer within 10 s", 10)
    clock.now += 9.9
    assert cluster.controller.recover_due() == []
    before = HOSTS_RECOVERED.labels("grace")._value.get()
    clock.now += 0.1
    assert cluster.controller.recover_due() == [here]
    assert recover_event(cluster, there, spec)["detail"].endswith(
        "its host not fenced (libvirt: no answer within 10 s): recovered after TTL + grace")
    assert HOSTS_RECOVERED.labels("grace")._value.get() == before + 1


def test_an_instance_ending_in_error_says_how_its_host_was_dealt_with():
    fencing = FakeFencing()
    cluster, clock, here, there, spec = dead_host_cluster(policy="error", fencing=fencing)
    clock.now += 10
    assert cluster.controller.recover_due() == [here]
    assert cluster.read(here, spec).record["error"] == (
        f"host {here} is down; recovered after TTL + grace (its fence not done)")


def test_without_fencing_nothing_is_fenced_and_nothing_changes():
    cluster, clock, here, there, spec = dead_host_cluster(place_on=None)
    assert not cluster.controller.fencing.enabled
    cluster.controller.place = _placer(there)
    clock.now += 10
    assert cluster.controller.recover_due() == [here]
    assert recover_event(cluster, there, spec)["detail"] == f"placed on {there}"


# --- a claim moved for a write that raised goes back (claims.written_or_undone) ----------


def _unreachable(*_args, **_kwargs):
    from etcd_compute.errors import EtcdUnavailable

    raise EtcdUnavailable("etcd: unreachable")


def test_a_reschedule_whose_write_raises_takes_its_claim_back(monkeypatch):
    """The alternate's claim is not kept for a move etcd never saw: a destroy of the
    instance on its host (which frees only a claim there) would leave it held forever."""
    import pytest

    from etcd_compute.errors import EtcdUnavailable

    cluster = Cluster()
    here, good = cluster.host(), cluster.host()
    spec = cluster.failed_build(here, [good])
    monkeypatch.setattr(moves, "move", _unreachable)
    with pytest.raises(EtcdUnavailable):
        cluster.controller.on_record(here, spec["uuid"])
    assert set(cluster.placement.get_allocations(spec["uuid"])["allocations"]) == {here}


def test_a_rebuild_whose_write_raises_takes_its_claim_back(monkeypatch):
    import pytest

    from etcd_compute.errors import EtcdUnavailable

    cluster, clock, here, there, spec = dead_host_cluster(place_on="")
    cluster.controller.place = _placer(there)
    monkeypatch.setattr(moves, "evacuate", _unreachable)
    clock.now += 10
    with pytest.raises(EtcdUnavailable):
        cluster.controller.recover_due()
    assert set(cluster.placement.get_allocations(spec["uuid"])["allocations"]) == {here}


def test_rebuilds_together_whose_write_raises_take_their_claims_back(monkeypatch):
    import pytest

    from etcd_compute.errors import EtcdUnavailable

    asked: list = []
    cluster, here, there, specs = dead_host_with(3)
    cluster.controller.place_many = planned_on(there, asked)
    real = cluster.store.commit

    def commit(txn):
        if len(txn.success) > 6:  # the one transaction of all three
            raise EtcdUnavailable("etcd: unreachable")
        return real(txn)

    monkeypatch.setattr(cluster.store, "commit", commit)
    with pytest.raises(EtcdUnavailable):
        cluster.controller.recover_due()
    for spec in specs:
        assert set(cluster.placement.get_allocations(spec["uuid"])["allocations"]) == {here}


def test_a_rebuild_with_etcd_gone_for_its_undo_too_puts_the_claim_back_on_its_host(
        monkeypatch):
    import pytest

    from etcd_compute.errors import EtcdUnavailable

    cluster, clock, here, there, spec = dead_host_cluster(place_on="")
    cluster.controller.place = _placer(there)

    def etcd_gone(*args, **kwargs):
        monkeypatch.setattr(records, "read_record", _unreachable)  # from now on
        _unreachable()

    monkeypatch.setattr(moves, "evacuate", etcd_gone)
    clock.now += 10
    with pytest.raises(EtcdUnavailable):
        cluster.controller.recover_due()
    assert set(cluster.placement.get_allocations(spec["uuid"])["allocations"]) == {here}

"""Filters and weighers visible in placements across simulated hosts (real etcd + Placement)."""

from __future__ import annotations

import random
import time
import uuid as uuidlib
from collections import Counter

import pytest

from etcd_compute import messages
from etcd_compute.config import deep_merge
from etcd_compute.errors import EtcdComputeError, NoValidHost, UsageError
from etcd_compute.scheduler import RequestSpec, Scheduler
from tests.scheduler.conftest import add_host

QUERY = "resources=VCPU:1,MEMORY_MB:256,DISK_GB:1"


def scheduler_for(schedule_config, store, placement, **settings):
    config = deep_merge(schedule_config, {"scheduler": {"host_subset_size": 1, **settings}})
    return Scheduler(config, store=store, placement=placement, rng=random.Random(4))


def hosts_used(placement, destinations):
    return Counter(d.host for d in destinations)


def test_spread_by_default_pack_with_negative_multipliers(schedule_config, store, placement):
    hosts = [add_host(placement, store, f"spread-{i}") for i in range(3)]
    spread = scheduler_for(schedule_config, store, placement)
    one_by_one = [spread.select_destinations(RequestSpec.build(QUERY))[0] for _ in range(6)]
    assert sorted(hosts_used(placement, one_by_one).values()) == [2, 2, 2]
    # Virtual depletion spreads the instances of one request too.
    batch = spread.select_destinations(RequestSpec.build(QUERY, count=3))
    assert set(hosts_used(placement, batch)) == set(hosts)

    # Pack: give the hosts different free amounts (free the spread claims, then take 1, 3
    # and 2 VCPU); a packing scheduler fills the fullest host first, a spreading one would not.
    for destination in one_by_one + batch:
        placement.delete_allocations(destination.uuid)
    settings = schedule_config["scheduler"]
    for host, used in zip(hosts, (1, 3, 2), strict=True):
        placement.claim(str(uuidlib.uuid4()),
                        {host: {"resources": {"VCPU": used, "MEMORY_MB": 256 * used,
                                              "DISK_GB": used}}},
                        settings["project_id"], settings["user_id"])
    pack = scheduler_for(schedule_config, store, placement,
                         weighers={"RAMWeigher": -1.0, "CPUWeigher": -1.0})
    packed = pack.select_destinations(RequestSpec.build(QUERY, count=3))
    # hosts[1] (1 VCPU free) is filled first, then hosts[2] (2 free) twice; hosts[0] untouched.
    assert [d.host for d in packed] == [hosts[1], hosts[2], hosts[2]]
    assert [placement.get_usages(h)["VCPU"] for h in hosts] == [1, 4, 4]


def test_pack_fills_one_host_before_the_next(schedule_config, store, placement):
    hosts = [add_host(placement, store, f"pack-{i}") for i in range(3)]
    pack = scheduler_for(schedule_config, store, placement,
                         weighers={"RAMWeigher": -1.0, "CPUWeigher": -1.0})
    placed = [pack.select_destinations(RequestSpec.build(QUERY))[0] for _ in range(5)]
    counts = hosts_used(placement, placed)
    assert sorted(counts.values()) == [1, 4]
    assert sum(placement.get_usages(h).get("VCPU", 0) for h in hosts) == 5


def test_anti_affinity_spreads_group_and_then_refuses(schedule_config, store, placement):
    hosts = [add_host(placement, store, f"aa-{i}", totals={"VCPU": 16, "MEMORY_MB": 8192,
                                                           "DISK_GB": 100}) for i in range(3)]
    # Pack would put everything on one host; anti-affinity must win over it.
    scheduler = scheduler_for(schedule_config, store, placement,
                              weighers={"RAMWeigher": -1.0, "CPUWeigher": -1.0})
    first = scheduler.select_destinations(RequestSpec.build(QUERY, count=2,
                                                            group=("web", "anti-affinity")))
    third = scheduler.select_destinations(RequestSpec.build(QUERY, group=("web",
                                                                          "anti-affinity")))
    assert {d.host for d in first + third} == set(hosts)
    members = store.read_prefix(messages.GROUP_MEMBER, store.keys.group("web"))
    assert {m["host"] for m in members.values()} == set(hosts)
    with pytest.raises(NoValidHost) as caught:
        scheduler.select_destinations(RequestSpec.build(QUERY, group=("web", "anti-affinity")))
    assert "AntiAffinityFilter removed 3 host(s): already hosts a member of the " \
           "anti-affinity group [aa-0, aa-1, aa-2]" in caught.value.reasons
    # Another group is unaffected.
    assert scheduler.select_destinations(RequestSpec.build(QUERY, group=("db", "anti-affinity")))


def test_affinity_keeps_group_on_one_host(schedule_config, store, placement):
    for i in range(3):
        add_host(placement, store, f"aff-{i}")
    scheduler = scheduler_for(schedule_config, store, placement)  # spread by default
    placed = scheduler.select_destinations(RequestSpec.build(QUERY, count=2,
                                                             group=("db", "affinity")))
    placed += scheduler.select_destinations(RequestSpec.build(QUERY, group=("db", "affinity")))
    assert len({d.host for d in placed}) == 1


def test_build_failures_push_a_host_back(schedule_config, store, placement):
    hosts = [add_host(placement, store, f"bf-{i}") for i in range(2)]
    # Nova weighs build failures a million times heavier than free RAM; 10 is enough here.
    scheduler = scheduler_for(schedule_config, store, placement, weighers={
        "RAMWeigher": 1.0, "CPUWeigher": 1.0, "BuildFailureWeigher": 10.0})
    scheduler.update_resource_stats(hosts[0], {"build_failures": [time.time()] * 3})
    placed = [scheduler.select_destinations(RequestSpec.build(QUERY))[0] for _ in range(3)]
    assert {d.host for d in placed} == {hosts[1]}
    # By provider name as well as uuid.
    scheduler.update_resource_stats("bf-1", {"build_failures": []})
    stats, _ = store.read(messages.HOST_STATS, store.keys.stats(hosts[1]))
    assert stats["build_failures"] == []


def test_spec_record_member_and_alternates_written_together(schedule_config, store, placement):
    hosts = [add_host(placement, store, f"alt-{i}") for i in range(4)]
    scheduler = scheduler_for(schedule_config, store, placement, max_attempts=3)
    destinations = scheduler.select_destinations(
        RequestSpec.build(QUERY, count=2, name="web", group=("g1", "anti-affinity")))
    assert len({d.host for d in destinations}) == 2
    revisions = set()
    for index, destination in enumerate(destinations, start=1):
        spec_key = store.keys.spec(destination.host, destination.uuid)
        record_key = store.keys.record(destination.host, destination.uuid)
        member_key = store.keys.group_member("g1", destination.uuid)
        spec, _ = store.read(messages.INSTANCE_SPEC, spec_key)
        assert spec["action"] == "build" and spec["name"] == f"web-{index}"
        assert len(spec["alternates"]) == 2
        assert {a["host"] for a in spec["alternates"]} < set(hosts) - {destination.host}
        record, _ = store.read(messages.INSTANCE_RECORD, record_key)
        assert record["state"] == "SCHEDULED" and record["host"] == destination.host
        member, _ = store.read(messages.GROUP_MEMBER, member_key)
        assert member == {"host": destination.host, "policy": "anti-affinity"}
        keys = (spec_key, record_key, member_key, store.keys.location(destination.uuid))
        revisions |= {store.get(key).mod_revision for key in keys}
    # One etcd transaction for the whole request: every key of every instance at one revision.
    assert len(revisions) == 1


def test_failed_etcd_write_undoes_the_claim(schedule_config, store, placement, monkeypatch):
    host = add_host(placement, store, "undo",
                    totals={"VCPU": 32, "MEMORY_MB": 8192, "DISK_GB": 40})
    # A real refusal on the real write path: 26 specs with 64 KiB of user-data each make the
    # one spec-writing transaction ~1.7 MB, over etcd's --max-request-bytes (1.5 MiB by
    # default) and under gRPC's own limit (2 MiB), so etcd itself answers "request is too large".
    claimed: list[list[str]] = []
    claim_many = placement.claim_many

    def watched_claim_many(claims, *args, **kwargs):  # observes; the real claim still happens
        claimed.append(list(claims))
        return claim_many(claims, *args, **kwargs)

    monkeypatch.setattr(placement, "claim_many", watched_claim_many)
    # The scheduler refuses such a request before claiming when it knows etcd's limit;
    # here it is told a wrong (larger) one, as a misconfigured scheduler would be.
    scheduler = scheduler_for(schedule_config, store, placement,
                              etcd_max_request_bytes=16 * 2**20)
    with pytest.raises(EtcdComputeError) as caught:
        scheduler.select_destinations(RequestSpec.build(QUERY, count=26,
                                                        user_data="x" * 65536))
    assert str(caught.value).startswith("etcd refused the request: ")
    assert "too large" in str(caught.value)
    assert [len(consumers) for consumers in claimed] == [26]  # it was claimed ...
    for consumer in claimed[0]:  # ... and undone
        assert placement.get_allocations(consumer)["allocations"] == {}
    assert placement.get_usages(host) == {"VCPU": 0, "MEMORY_MB": 0, "DISK_GB": 0}
    for prefix in (store.keys.hosts(), store.keys.locations()):
        assert store.get_prefix(prefix, keys_only=True)[0] == []


def test_a_request_too_large_for_etcd_is_refused_before_any_claim(schedule_config, store,
                                                                  placement):
    host = add_host(placement, store, "too-large",
                    totals={"VCPU": 32, "MEMORY_MB": 8192, "DISK_GB": 40})
    scheduler = scheduler_for(schedule_config, store, placement)
    with pytest.raises(UsageError) as caught:
        scheduler.select_destinations(RequestSpec.build(QUERY, count=26,
                                                        user_data="x" * 65536))
    assert "etcd allows 1572864" in str(caught.value)
    assert placement.get_usages(host) == {"VCPU": 0, "MEMORY_MB": 0, "DISK_GB": 0}
    assert placement.conflicts == 0

"""One request end to end in memory: plan, claim (FakePlacement), write (FakeStore); undo the
claim when the write fails, plan again after a lost race, explain when nothing fits."""

from __future__ import annotations

import random
import time
import uuid as uuidlib

import pytest

from etcd_compute import messages
from etcd_compute.config import deep_merge, validate
from etcd_compute.defaults import SCHEDULE_DEFAULTS
from etcd_compute.errors import (
    ConflictError,
    NoValidHost,
    PlacementError,
    ServiceUnavailable,
    UsageError,
)
from etcd_compute.etcd import Put, Txn
from etcd_compute.hosts import put_stats
from etcd_compute.instances import host as host_txn
from etcd_compute.instances import records, scheduling
from etcd_compute.keys import SPECS
from etcd_compute.network_backend import LIBVIRT, NEUTRON, trait_of
from etcd_compute.scheduler import RequestSpec, Scheduler
from tests.support import make_spec
from tests.unit.fakes import FakePlacement, FakeStore

QUERY = "resources=VCPU:1,MEMORY_MB:256,DISK_GB:1"
ONE = {"VCPU": 1, "MEMORY_MB": 256, "DISK_GB": 1}
# claim_retries 2 keeps tenacity's jittered waits (<= 0.05 s, 0.1 s) short.
CONFIG = deep_merge(SCHEDULE_DEFAULTS, {"scheduler": {
    "default_image": "file:///dev/null", "host_subset_size": 1, "claim_retries": 2}})


def add_host(placement: FakePlacement, store: FakeStore, name: str, vcpu: int = 4,
             alive: bool = True, uuid: str | None = None) -> str:
    uuid = uuid or str(uuidlib.uuid4())
    placement.ensure_provider(uuid, name)
    placement.set_traits(uuid, {trait_of(LIBVIRT)})  # as a compute registers
    placement.set_inventory(uuid, {"VCPU": {"total": vcpu},
                                   "MEMORY_MB": {"total": 256 * vcpu},
                                   "DISK_GB": {"total": 10 * vcpu}})
    if alive:
        store.put(messages.ALIVE, store.keys.alive(uuid),
                  {"host": uuid, "name": name, "since": time.time()})
    return uuid


def make_scheduler(store, placement, seed: int = 1, **settings) -> Scheduler:
    config = deep_merge(CONFIG, {"scheduler": settings})
    validate(config, "schedule_config", "unit test")
    return Scheduler(config, store=store, placement=placement, rng=random.Random(seed))


def spec_keys(store: FakeStore) -> list[str]:
    entries, _ = store.get_prefix(store.keys.hosts(), keys_only=True)
    return [e.key for e in entries
            if (parsed := store.keys.parse_host_key(e.key)) and parsed.kind == SPECS]


def claims(placement: FakePlacement) -> list[str]:
    return [c for c in placement.calls if c.startswith("claim")]


# ----------------------------------------------------------------------- success


def test_select_destinations_claims_and_writes_every_instance():
    store, placement = FakeStore("/t"), FakePlacement()
    hosts = {add_host(placement, store, f"host-{i}"): f"host-{i}" for i in range(3)}
    scheduler = make_scheduler(store, placement)
    destinations = scheduler.select_destinations(RequestSpec.build(QUERY, count=2, name="web"))
    assert [d.name for d in destinations] == ["web-1", "web-2"]
    assert len({d.host for d in destinations}) == 2  # spread, also within one request
    assert claims(placement) == ["claim_many 2"]
    for d in destinations:
        assert d.host_name == hosts[d.host]
        assert d.allocations == {d.host: {"resources": ONE}}
        assert placement.consumers[d.uuid]["allocations"] == d.allocations
        assert placement.consumers[d.uuid]["project_id"] == CONFIG["scheduler"]["project_id"]
        assert len(d.alternates) == 2 and d.host not in {a["host"] for a in d.alternates}
        spec, _ = store.read(messages.INSTANCE_SPEC, store.keys.spec(d.host, d.uuid))
        assert (spec["action"], spec["name"], spec["alternates"]) == ("build", d.name,
                                                                     d.alternates)
        record, _ = store.read(messages.INSTANCE_RECORD, store.keys.record(d.host, d.uuid))
        assert (record["state"], record["host_name"]) == ("SCHEDULED", hosts[d.host])
    assert scheduler.replans == 0


def test_a_spec_is_stamped_when_it_is_written_not_before_its_claim():
    # requested_at is where the host's notification latency starts (bench, request lag).
    store, placement = FakeStore(), FakePlacement()
    add_host(placement, store, "only")
    claimed_at = []
    claim = placement.claim

    def slow_claim(*args, **kwargs):
        time.sleep(0.05)
        claimed_at.append(time.time())
        return claim(*args, **kwargs)

    placement.claim = slow_claim
    (d,) = make_scheduler(store, placement).select_destinations(RequestSpec.build(QUERY))
    spec, _ = store.read(messages.INSTANCE_SPEC, store.keys.spec(d.host, d.uuid))
    assert spec["requested_at"] >= claimed_at[0]


def test_one_instance_is_claimed_with_one_put():
    store, placement = FakeStore(), FakePlacement()
    add_host(placement, store, "only")
    (d,) = make_scheduler(store, placement).select_destinations(RequestSpec.build(QUERY))
    assert claims(placement) == [f"claim {d.uuid}"]
    assert spec_keys(store) == [store.keys.spec(d.host, d.uuid)]


def test_anti_affinity_members_in_etcd_are_respected_across_requests():
    store, placement = FakeStore(), FakePlacement()
    hosts = {add_host(placement, store, f"aa-{i}") for i in range(2)}
    scheduler = make_scheduler(store, placement)
    group = ("web", "anti-affinity")
    first = scheduler.select_destinations(RequestSpec.build(QUERY, group=group))
    second = scheduler.select_destinations(RequestSpec.build(QUERY, group=group))
    assert {first[0].host, second[0].host} == hosts
    with pytest.raises(NoValidHost) as caught:
        scheduler.select_destinations(RequestSpec.build(QUERY, group=group))
    assert any(r.startswith("AntiAffinityFilter removed 2 host(s)") for r in caught.value.reasons)


def test_a_group_asked_with_another_policy_is_a_usage_error():
    store, placement = FakeStore(), FakePlacement()
    add_host(placement, store, "h")
    scheduler = make_scheduler(store, placement)
    scheduler.select_destinations(RequestSpec.build(QUERY, group=("db", "affinity")))
    with pytest.raises(UsageError, match="group 'db' has policy affinity, not anti-affinity"):
        scheduler.select_destinations(RequestSpec.build(QUERY, group=("db", "anti-affinity")))


# ------------------------------------------------------------ etcd transaction size


@pytest.mark.parametrize("count, group, fits", [
    (2, None, True), (3, None, False), (1, ("g", "affinity"), True),
    (2, ("g", "affinity"), False)])
def test_count_beyond_etcd_max_txn_ops_is_refused_before_any_claim(count, group, fits):
    store, placement = FakeStore(), FakePlacement()
    add_host(placement, store, "big", vcpu=16)
    scheduler = make_scheduler(store, placement, etcd_max_txn_ops=6)
    request = RequestSpec.build(QUERY, count=count, group=group)
    if fits:
        assert len(scheduler.select_destinations(request)) == count
        return
    with pytest.raises(UsageError) as caught:
        scheduler.select_destinations(request)
    per = 4 if group else 3  # spec, record, location (and group member) per instance
    assert str(caught.value).startswith(f"--count {count} needs {count * per} etcd operations "
                                        "in one transaction; etcd allows 6")
    assert claims(placement) == [] and spec_keys(store) == []


def test_default_limit_allows_42_instances_or_32_in_a_group():
    store, placement = FakeStore(), FakePlacement()
    scheduler = make_scheduler(store, placement)
    for count, group in ((43, None), (33, ("g", "affinity"))):
        with pytest.raises(UsageError, match="etcd allows 128"):
            scheduler.select_destinations(RequestSpec.build(QUERY, count=count, group=group))
    assert claims(placement) == []
    for count, group in ((42, None), (32, ("g", "affinity"))):
        store, placement = FakeStore(), FakePlacement()
        add_host(placement, store, "big", vcpu=count)
        assert len(make_scheduler(store, placement).select_destinations(
            RequestSpec.build(QUERY, count=count, group=group))) == count
        assert len(store.committed[-1].success) in (126, 128)


# ------------------------------------------------------------ a failed etcd write


class FailingStore(FakeStore):
    """etcd that fails every write once `failure` is set (set it after the setup)."""

    failure: BaseException | None = None

    def commit(self, txn: Txn) -> int | None:
        if self.failure is not None:
            raise self.failure
        return super().commit(txn)


@pytest.mark.parametrize("failure", [ServiceUnavailable("etcd is unreachable (simulated)"),
                                     KeyboardInterrupt()])
def test_a_failed_etcd_write_undoes_the_claim(failure):
    store, placement = FailingStore(), FakePlacement()
    host = add_host(placement, store, "undo")
    store.failure = failure
    with pytest.raises(type(failure)):
        make_scheduler(store, placement).select_destinations(RequestSpec.build(QUERY, count=2))
    assert claims(placement) == ["claim_many 2"]
    assert len([c for c in placement.calls if c.startswith("delete_allocations")]) == 2
    assert placement.consumers == {}
    assert placement.get_usages(host) == {"VCPU": 0, "MEMORY_MB": 0, "DISK_GB": 0}
    assert spec_keys(store) == []


class RivalGroupStore(FakeStore):
    """A concurrent scheduler places an anti-affinity member on our chosen host just before
    our first spec write (spec, record, location and member), so that write's group compare
    fails."""

    rival: str | None = None
    rival_uuid: str | None = None

    def commit(self, txn: Txn) -> int | None:
        specs = [parsed for op in txn.success
                 if isinstance(op, Put) and (parsed := self.keys.parse_spec(op.key))]
        if specs and self.rival is None:
            self.rival = specs[0][0]
            spec = make_spec(self.rival, group={"name": "web", "policy": "anti-affinity"})
            self.rival_uuid = spec["uuid"]
            assert super().commit(scheduling.schedule_txn(self.keys, [(spec, "rival")]))
        return super().commit(txn)


def test_a_group_that_changed_while_planning_frees_the_claim_and_plans_again():
    store, placement = RivalGroupStore(), FakePlacement()
    hosts = {add_host(placement, store, f"g-{i}") for i in range(2)}
    scheduler = make_scheduler(store, placement)
    (d,) = scheduler.select_destinations(RequestSpec.build(QUERY, group=("web", "anti-affinity")))
    assert scheduler.replans == 1
    assert d.host == (hosts - {store.rival}).pop()
    assert len(claims(placement)) == 2
    assert list(placement.consumers) == [d.uuid]  # the first claim was deleted
    assert spec_keys(store) == sorted([store.keys.spec(d.host, d.uuid),
                                       store.keys.spec(store.rival, store.rival_uuid)])


def test_a_group_member_whose_instance_ended_does_not_hold_its_host():
    store, placement = FakeStore(), FakePlacement()
    hosts = {add_host(placement, store, f"aa-{i}") for i in range(2)}
    scheduler = make_scheduler(store, placement)
    group = ("web", "anti-affinity")
    first, second = (scheduler.select_destinations(RequestSpec.build(QUERY, group=group))[0]
                     for _ in range(2))
    assert {first.host, second.host} == hosts
    # The first one failed on its host (ERROR): it no longer counts against its host, but
    # its member stays (its host may not delete it).
    spec, _ = store.read(messages.INSTANCE_SPEC, store.keys.spec(first.host, first.uuid))
    host_txn.fail(store, spec, records.read_record(store, first.host, first.uuid), "x")
    (third,) = scheduler.select_destinations(RequestSpec.build(QUERY, group=group))
    assert third.host == first.host
    assert store.get(store.keys.group_member("web", first.uuid)) is not None
    # The second one was deleted and its record expired: its member and location are
    # forgotten by the scheduler reading the group.
    spec, _ = store.read(messages.INSTANCE_SPEC, store.keys.spec(second.host, second.uuid))
    host_txn.delete(store, spec, records.read_record(store, second.host, second.uuid), 60)
    store.delete(store.keys.record(second.host, second.uuid))
    (fourth,) = scheduler.select_destinations(RequestSpec.build(QUERY, group=group))
    assert fourth.host == second.host
    assert store.get(store.keys.group_member("web", second.uuid)) is None
    assert records.locate(store, second.uuid) is None


# ------------------------------------------------------------------- lost races


class RacingPlacement(FakePlacement):
    """Another scheduler takes the last free VCPU of the host we claim, `races` times."""

    races = 1
    attempts = 0  # our claims (the rival's are not counted)

    def _race(self, allocations_by_consumer: dict) -> None:
        self.attempts += 1
        if self.races <= 0:
            return
        self.races -= 1
        for allocations in allocations_by_consumer.values():
            for rp in allocations:
                free = self.capacity(rp, "VCPU") - self.get_usages(rp).get("VCPU", 0)
                if free:
                    FakePlacement.claim(self, str(uuidlib.uuid4()),
                                        {rp: {"resources": {"VCPU": free}}}, "rival", "rival")

    def claim(self, consumer, allocations, *args, **kwargs) -> None:
        self._race({consumer: allocations})
        super().claim(consumer, allocations, *args, **kwargs)

    def claim_many(self, claims_by_consumer, *args, **kwargs) -> None:
        self._race(claims_by_consumer)
        super().claim_many(claims_by_consumer, *args, **kwargs)


def test_a_lost_claim_race_plans_again_with_fresh_candidates():
    store, placement = FakeStore(), RacingPlacement()
    hosts = [add_host(placement, store, f"race-{i}") for i in range(2)]
    scheduler = make_scheduler(store, placement)
    (d,) = scheduler.select_destinations(RequestSpec.build(QUERY))
    assert placement.attempts == 2 and placement.conflicts == scheduler.replans == 1
    (rival,) = [c for c in placement.consumers.values() if c["project_id"] == "rival"]
    (taken,) = rival["allocations"]
    assert set(hosts) == {taken, d.host}  # the second plan saw the rival's host full
    ours = [c for c, data in placement.consumers.items() if data["project_id"] != "rival"]
    assert ours == [d.uuid]
    assert spec_keys(store) == [store.keys.spec(d.host, d.uuid)]


def test_every_claim_lost_raises_conflict_after_claim_retries_plus_one_attempts():
    store, placement = FakeStore(), RacingPlacement()
    placement.races = 100
    for i in range(5):
        add_host(placement, store, f"lost-{i}", vcpu=8)
    scheduler = make_scheduler(store, placement, claim_retries=2)
    with pytest.raises(ConflictError) as caught:
        scheduler.select_destinations(RequestSpec.build(QUERY))
    assert placement.attempts == placement.conflicts == scheduler.replans == 3
    assert caught.value.status == 409
    assert str(caught.value).startswith("lost the race for capacity 3 times (last: ")
    assert spec_keys(store) == []


# ------------------------------------------------------------------ no valid host


def test_no_valid_host_when_placement_has_no_candidates_names_the_class():
    store, placement = FakeStore(), FakePlacement()
    add_host(placement, store, "tiny", vcpu=1)
    with pytest.raises(NoValidHost) as caught:
        make_scheduler(store, placement).select_destinations(
            RequestSpec.build("resources=VCPU:2"))
    assert str(caught.value) == "NO ALLOCATIONS LEFT"
    assert caught.value.reasons == ["resources=VCPU:2: no resource provider has 2 VCPU free "
                                    "(largest free: 1, on 1 provider(s) with some)"]
    assert claims(placement) == []


def test_no_valid_host_when_filters_remove_everyone_says_which():
    store, placement = FakeStore(), FakePlacement()
    add_host(placement, store, "dead", alive=False)
    add_host(placement, store, "live")
    with pytest.raises(NoValidHost) as caught:
        make_scheduler(store, placement, candidate_limit=1).select_destinations(
            RequestSpec.build(QUERY))
    assert caught.value.reasons == [
        "AliveFilter removed 1 host(s): no heartbeat in etcd (/alive/<rp> missing: "
        "compute.py not running?) [dead]",
        "only 1 candidate host(s) considered (scheduler.candidate_limit); raise it to "
        "consider more",
    ]


def test_a_batch_that_does_not_fit_claims_nothing():
    store, placement = FakeStore(), FakePlacement()
    add_host(placement, store, "a", vcpu=1)
    add_host(placement, store, "b", vcpu=1)
    with pytest.raises(NoValidHost) as caught:
        make_scheduler(store, placement).select_destinations(RequestSpec.build(QUERY, count=3))
    assert caught.value.reasons[:2] == [
        "room for only 2 of the 3 instances requested; nothing was claimed",
        "2 of 2 candidate host(s) would be full with the earlier instances of this request"]
    assert claims(placement) == [] and spec_keys(store) == []


class RefusingPlacement(FakePlacement):
    def __init__(self, message: str) -> None:
        super().__init__()
        self.message = message

    def allocation_candidates(self, query: str):
        raise PlacementError(self.message, 400)


def test_placement_refusing_the_query_is_a_usage_error():
    store = FakeStore()
    scheduler = make_scheduler(store, RefusingPlacement("Invalid resource class in resources"))
    with pytest.raises(UsageError, match="Placement rejected the query: Invalid resource"):
        scheduler.select_destinations(RequestSpec.build(QUERY))


def test_an_unknown_trait_is_no_valid_host_not_an_error():
    class UnknownTrait(FakePlacement):
        def allocation_candidates(self, query: str):
            if "CUSTOM_NEVER" in query:
                raise PlacementError("No such trait(s): CUSTOM_NEVER", 400)
            return super().allocation_candidates(query)

    store, placement = FakeStore(), UnknownTrait()
    add_host(placement, store, "plain")
    with pytest.raises(NoValidHost) as caught:
        make_scheduler(store, placement).select_destinations(
            RequestSpec.build(QUERY + "&required=CUSTOM_NEVER"))
    assert caught.value.reasons == ["required=CUSTOM_NEVER: no provider with enough free "
                                    "resources has trait CUSTOM_NEVER"]


# -------------------------------------------------------------------------- stats


def test_update_resource_stats_by_uuid_or_provider_name():
    store, placement = FakeStore(), FakePlacement()
    host = add_host(placement, store, "stats-host")
    scheduler = make_scheduler(store, placement)
    scheduler.update_resource_stats(host, {"build_failures": [1.0], "updated_at": 2.0})
    assert store.read(messages.HOST_STATS, store.keys.stats(host))[0] == {
        "build_failures": [1.0], "updated_at": 2.0}
    scheduler.update_resource_stats("stats-host", {"build_failures": []})
    stats, _ = store.read(messages.HOST_STATS, store.keys.stats(host))
    assert stats["build_failures"] == [] and stats["updated_at"] > 2.0
    with pytest.raises(UsageError, match="no resource provider named 'nope'"):
        scheduler.update_resource_stats("nope", {})


def test_recent_build_failures_push_a_host_back():
    store, placement = FakeStore(), FakePlacement()
    failing = add_host(placement, store, "failing", vcpu=8)  # the freest host
    other = add_host(placement, store, "other", vcpu=2)
    scheduler = make_scheduler(store, placement)
    scheduler.update_resource_stats(failing, {"build_failures": [time.time()]})
    (d,) = scheduler.select_destinations(RequestSpec.build(QUERY))
    assert d.host == other


# ------------------------------------------------------------------ candidate shards


def sharded_cluster(hosts: int = 24):
    from etcd_compute.shards import aggregate_of

    store, placement = FakeStore("/t"), FakePlacement()
    # Fixed uuids: the shard a host joins follows from its uuid, and the tests below count
    # on which shards the seeded scheduler asks first (random uuids made that a draw).
    uuids = [add_host(placement, store, f"host-{i}",
                      uuid=str(uuidlib.UUID(int=(0x5EED << 64) + i, version=4)))
             for i in range(hosts)]
    for uuid in uuids:
        placement.set_aggregates(uuid, [aggregate_of(uuid)])
    return store, placement, uuids


def test_a_large_cluster_is_asked_about_a_few_shards_only():
    from etcd_compute.shards import aggregate_of

    store, placement, _ = sharded_cluster()
    asked = []
    real = placement.allocation_candidates
    placement.allocation_candidates = lambda q: asked.append(q) or real(q)
    scheduler = make_scheduler(store, placement, shard_above_hosts=10, candidate_limit=4)
    (destination,) = scheduler.select_destinations(RequestSpec.build(QUERY))
    (query,) = asked
    assert "member_of=in:" in query
    assert aggregate_of(destination.host) in query
    small = make_scheduler(store, placement, shard_above_hosts=30)  # 24 hosts: all of them
    asked.clear()
    small.select_destinations(RequestSpec.build(QUERY))
    assert "member_of" not in asked[0]


def test_a_sharded_query_without_room_is_asked_again_of_every_host():
    store, placement, uuids = sharded_cluster()
    # Only one host has room left: every other is full.
    for uuid in uuids[1:]:
        placement.claim(str(uuidlib.uuid4()), {uuid: {"resources": {"VCPU": 4}}}, "p", "u")
    scheduler = make_scheduler(store, placement, shard_above_hosts=10, candidate_limit=4)
    for _ in range(3):
        (destination,) = scheduler.select_destinations(RequestSpec.build(QUERY))
        assert destination.host == uuids[0]
    assert scheduler.unsharded >= 1  # (seeded: the shards picked first missed host-0)
    with pytest.raises(NoValidHost) as full:  # its 4 VCPU: one left; then none anywhere
        for _ in range(2):
            scheduler.select_destinations(RequestSpec.build(QUERY))
    assert any("VCPU" in reason for reason in full.value.reasons)  # explained from all


# ------------------------------------------------------------------ round trips


def timeline(store: FakeStore, placement: FakePlacement, scheduler: Scheduler) -> list[str]:
    """What a request asks of etcd and Placement, in order; Placement answers the candidates
    query only once the reads sent meanwhile are done (the scheduler's one background
    thread has run what it was given before)."""
    events: list[str] = []
    read_many, candidates = store.read_many, placement.allocation_candidates

    def reading(ranges):
        events.append("count alive" if ranges[0].count_only and
                      ranges[0].key == store.keys.alive_prefix() else "read")
        return read_many(ranges)

    def asking(query):
        scheduler._background.submit(lambda: None).result(timeout=5)
        events.append("candidates")
        return candidates(query)

    store.read_many, placement.allocation_candidates = reading, asking
    return events


def test_etcd_is_read_only_while_placement_answers_the_candidates_query():
    store, placement = FakeStore("/t"), FakePlacement()
    busy, free = (add_host(placement, store, name) for name in ("busy", "free"))
    store.put_raw(store.keys.spec(busy, str(uuidlib.uuid4())), "{}")
    # (The candidates path's round trips; a plan on the hosts' accounts: test_hostview.py.)
    scheduler = make_scheduler(store, placement, max_instances_per_host=1, host_view=False)
    events = timeline(store, placement, scheduler)
    (destination,) = scheduler.select_destinations(RequestSpec.build(QUERY))
    assert destination.host == free  # the counts read in the background were used
    # Whether to shard (the first request of a scheduler), then in the background
    # heartbeats and stats, then instance counts; nothing after Placement's answer.
    assert events == ["count alive", "read", "read", "candidates"]


def test_without_the_alive_filter_hosts_without_a_heartbeat_are_counted_too():
    store, placement = FakeStore("/t"), FakePlacement()
    dead = add_host(placement, store, "dead", alive=False)
    free = add_host(placement, store, "free")
    store.put_raw(store.keys.spec(dead, str(uuidlib.uuid4())), "{}")
    scheduler = make_scheduler(store, placement, max_instances_per_host=1,
                               filters=["MaxInstancesPerHostFilter"], host_view=False)
    events = timeline(store, placement, scheduler)
    for _ in range(3):  # (host_subset_size 1: the emptier host, unless counted full)
        (destination,) = scheduler.select_destinations(RequestSpec.build(QUERY))
        assert destination.host == free
        placement.consumers.clear()
        store.entries = {k: e for k, e in store.entries.items()
                         if not k.startswith(store.keys.specs(free))}
    assert events[:5] == ["count alive", "read", "read", "candidates", "read"]  # the dead
    # host's count, after Placement named it


def test_a_scheduler_counts_live_hosts_for_sharding_once_in_a_while_not_per_request():
    store, placement, _ = sharded_cluster()
    scheduler = make_scheduler(store, placement, shard_above_hosts=10, candidate_limit=4,
                               host_view=False)
    events = timeline(store, placement, scheduler)
    for _ in range(3):
        scheduler.select_destinations(RequestSpec.build(QUERY))
    assert events.count("count alive") == 1
    assert events.count("candidates") == 3


# ------------------------------------------------------- planned on the hosts' accounts


def account(placement: FakePlacement, store: FakeStore, rp: str,
            used: dict[str, int] | None = None) -> None:
    """What the host's compute publishes (compute/capacity.py): its inventory and what it
    holds (`used`: its own view, which may lag Placement)."""
    inventory = {rc: {"min_unit": 1, "max_unit": inv["total"], "step_size": 1, **inv}
                 for rc, inv in placement.get_inventories(rp).items()}
    put_stats(store, rp, {"capacity": {"inventory": inventory, "used": used or {},
                                       "instances": 0, "as_of": 0,
                                       "traits": sorted(placement.get_traits(rp))}})


def accounted(placement: FakePlacement, store: FakeStore, count: int,
              vcpu: int = 4) -> list[str]:
    rps = [add_host(placement, store, f"host-{i}", vcpu=vcpu) for i in range(count)]
    for rp in rps:
        account(placement, store, rp)
    return rps


def test_a_plain_request_is_planned_on_the_accounts_placement_asked_only_for_the_claim():
    store, placement = FakeStore("/t"), FakePlacement()
    accounted(placement, store, 3)
    scheduler = make_scheduler(store, placement)
    events = timeline(store, placement, scheduler)
    (destination,) = scheduler.select_destinations(RequestSpec.build(QUERY))
    assert events == ["read"]  # heartbeats, stats and disables: one round trip
    assert claims(placement) == [f"claim {destination.uuid}"]
    assert spec_keys(store) == [store.keys.spec(destination.host, destination.uuid)]
    assert (scheduler.planned_on_view, scheduler.view_passed_on) == (1, 0)


def test_a_request_planned_on_the_accounts_is_claimed_for_its_own_project_and_user():
    store, placement = FakeStore("/t"), FakePlacement()
    full, roomy = accounted(placement, store, 2, vcpu=2)
    account(placement, store, roomy, used={"VCPU": 1})  # `full` first, refused: an alternate
    for _ in range(2):
        placement.claim(str(uuidlib.uuid4()), {full: {"resources": ONE}}, "p", "u")
    scheduler = make_scheduler(store, placement)
    (destination,) = scheduler.select_destinations(
        RequestSpec.build(QUERY, project_id="tenant", user_id="someone"))
    assert destination.host == roomy
    assert scheduler.planned_on_view == 1 and placement.conflicts == 1
    consumer = placement.consumers[destination.uuid]
    assert (consumer["project_id"], consumer["user_id"]) == ("tenant", "someone")


def test_an_account_behind_placement_sends_the_claim_to_an_alternate_never_over_capacity():
    store, placement = FakeStore("/t"), FakePlacement()
    full, roomy = accounted(placement, store, 2, vcpu=2)
    account(placement, store, roomy, used={"VCPU": 1})  # looks fuller than `full`
    for _ in range(2):  # `full` filled behind its account's back
        placement.claim(str(uuidlib.uuid4()), {full: {"resources": ONE}}, "p", "u")
    scheduler = make_scheduler(store, placement)
    (destination,) = scheduler.select_destinations(RequestSpec.build(QUERY))
    assert destination.host == roomy and destination.host_name == "host-1"
    assert destination.alternates == []
    assert placement.conflicts == 1 and scheduler.planned_on_view == 1
    assert placement.get_usages(full)["VCPU"] == 2  # its capacity, not more


def test_refused_everywhere_on_the_accounts_the_request_goes_to_placements_candidates():
    store, placement = FakeStore("/t"), FakePlacement()
    a, b, c = accounted(placement, store, 3, vcpu=1)
    account(placement, store, c, used=ONE)  # c looks full and is not
    for rp in (a, b):
        placement.claim(str(uuidlib.uuid4()), {rp: {"resources": ONE}}, "p", "u")
    scheduler = make_scheduler(store, placement)
    events = timeline(store, placement, scheduler)
    (destination,) = scheduler.select_destinations(RequestSpec.build(QUERY))
    assert destination.host == c
    assert placement.conflicts == 2 and events.count("candidates") == 1
    assert (scheduler.planned_on_view, scheduler.view_passed_on) == (0, 1)


def test_no_room_in_the_accounts_asks_placement_which_explains():
    store, placement = FakeStore("/t"), FakePlacement()
    (rp,) = accounted(placement, store, 1, vcpu=1)
    placement.claim(str(uuidlib.uuid4()), {rp: {"resources": ONE}}, "p", "u")
    account(placement, store, rp, used=ONE)
    scheduler = make_scheduler(store, placement)
    with pytest.raises(NoValidHost) as caught:
        scheduler.select_destinations(RequestSpec.build(QUERY))
    assert any("VCPU" in reason for reason in caught.value.reasons)
    assert scheduler.view_passed_on == 1 and placement.conflicts == 0


def test_a_live_host_without_an_account_sends_requests_to_placement_for_a_while():
    store, placement = FakeStore("/t"), FakePlacement()
    accounted(placement, store, 2)
    add_host(placement, store, "older-compute")
    scheduler = make_scheduler(store, placement)
    events = timeline(store, placement, scheduler)
    for _ in range(2):
        scheduler.select_destinations(RequestSpec.build(QUERY))
    assert events.count("candidates") == 2
    assert events[0] == "read" and events.count("read") == 1 + 2 * 2  # the view read once
    assert (scheduler.planned_on_view, scheduler.view_passed_on) == (0, 1)


def test_a_query_with_traits_never_reads_the_accounts():
    store, placement = FakeStore("/t"), FakePlacement()
    for rp in accounted(placement, store, 2):
        placement.set_traits(rp, placement.get_traits(rp) | {"CUSTOM_SSD"})
    scheduler = make_scheduler(store, placement, host_view=True)
    events = timeline(store, placement, scheduler)
    scheduler.select_destinations(RequestSpec.build(QUERY + "&required=CUSTOM_SSD"))
    assert "candidates" in events and scheduler.view_passed_on == 0
    assert scheduler.planned_on_view == 0


def test_a_stream_of_requests_sees_its_own_claims_the_accounts_do_not_show_yet():
    store, placement = FakeStore("/t"), FakePlacement()
    rps = accounted(placement, store, 3, vcpu=1)  # never republished: no compute runs
    scheduler = make_scheduler(store, placement)
    placed = [scheduler.select_destinations(RequestSpec.build(QUERY))[0].host
              for _ in range(3)]
    assert sorted(placed) == sorted(rps)
    assert placement.conflicts == 0 and scheduler.planned_on_view == 3


def test_anti_affinity_is_honoured_on_the_accounts_too():
    store, placement = FakeStore("/t"), FakePlacement()
    accounted(placement, store, 3)
    scheduler = make_scheduler(store, placement)
    spec = RequestSpec.build(QUERY, count=2, group=("web", "anti-affinity"))
    first = {d.host for d in scheduler.select_destinations(spec)}
    (third,) = scheduler.select_destinations(
        RequestSpec.build(QUERY, group=("web", "anti-affinity")))
    assert len(first) == 2 and third.host not in first
    assert scheduler.planned_on_view == 2
    with pytest.raises(NoValidHost):
        scheduler.select_destinations(RequestSpec.build(QUERY, group=("web", "anti-affinity")))


# ------------------------------------------------------- the network backend's trait


def backend_hosts(placement: FakePlacement, store: FakeStore) -> tuple[str, str]:
    """A host of each backend, both with an account: (libvirt's, neutron's)."""
    libvirt, neutron = accounted(placement, store, 2)
    placement.set_traits(neutron, {trait_of(NEUTRON)})
    account(placement, store, neutron)
    return libvirt, neutron


@pytest.mark.parametrize("host_view", [True, False])
@pytest.mark.parametrize("backend", [LIBVIRT, NEUTRON])
def test_a_request_goes_only_to_a_host_of_the_schedulers_own_network_backend(backend,
                                                                               host_view):
    store, placement = FakeStore("/t"), FakePlacement()
    hosts = dict(zip((LIBVIRT, NEUTRON), backend_hosts(placement, store), strict=True))
    config = deep_merge(CONFIG, {"network": {"backend": backend},
                                 "scheduler": {"host_view": host_view}})
    scheduler = Scheduler(config, store=store, placement=placement, rng=random.Random(1))
    placed = {scheduler.select_destinations(RequestSpec.build(QUERY))[0].host
              for _ in range(4)}
    assert placed == {hosts[backend]}
    assert scheduler.planned_on_view == (4 if host_view else 0)


def test_no_host_of_the_backend_is_told_as_such():
    store, placement = FakeStore("/t"), FakePlacement()
    accounted(placement, store, 2)  # libvirt's only
    config = deep_merge(CONFIG, {"network": {"backend": NEUTRON}})
    scheduler = Scheduler(config, store=store, placement=placement, rng=random.Random(1))
    with pytest.raises(NoValidHost) as raised:
        scheduler.select_destinations(RequestSpec.build(QUERY))
    assert any(f"root_required={trait_of(NEUTRON)}: no host" in reason
               for reason in raised.value.reasons)


# ------------------------------------------------------- an existing instance placed again


def test_the_host_an_instance_was_created_on_does_not_bind_its_moves():
    """The create's host (the API's 2.74 `host` or `zone:host`: an `in_tree` in the query
    its spec keeps) was that request's alone, as Nova persists no requested_destination:
    placed again with its host left out (a move, a recovery), it goes to another host.
    Placement offered only the host left out, and the move was refused with "no room"."""
    store, placement = FakeStore("/t"), FakePlacement()
    source, other = (add_host(placement, store, f"host-{i}") for i in range(2))
    scheduler = make_scheduler(store, placement)
    spec = make_spec(source, query=f"{QUERY}&in_tree={source}")
    assert scheduler.place(spec, frozenset({source})).host.uuid == other


def test_a_named_destination_is_asked_of_placement_by_its_tree():
    """As Nova's requested destination: `in_tree` of the named host, so that a host past
    `candidate_limit` (Placement's first answers) is still asked about; full, the reason
    names it."""
    store, placement = FakeStore("/t"), FakePlacement()
    hosts = [add_host(placement, store, f"host-{i}", vcpu=1) for i in range(4)]
    scheduler = make_scheduler(store, placement, candidate_limit=2)
    spec = make_spec(hosts[0], query=QUERY)
    pick = scheduler.place(spec, frozenset({hosts[0]}), destination=hosts[3])
    assert pick.host.uuid == hosts[3]
    assert pick.allocations == {hosts[3]: {"resources": ONE}}
    placement.claim(str(uuidlib.uuid4()), {hosts[3]: {"resources": ONE}}, "p", "u")  # full
    with pytest.raises(NoValidHost) as full:
        scheduler.place(spec, frozenset({hosts[0]}), destination=hosts[3])
    assert full.value.reasons and all("no room" not in r for r in full.value.reasons)

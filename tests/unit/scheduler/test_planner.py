"""The planner on hand-made host states: virtual depletion, NoRoom reports, alternates,
random pick among the best, server-group bookkeeping."""

from __future__ import annotations

import random
from collections import Counter

import pytest

from etcd_compute.scheduler.context import PlanContext
from etcd_compute.scheduler.filters import (
    AffinityFilter,
    AliveFilter,
    AntiAffinityFilter,
    DisabledFilter,
    MaxInstancesPerHostFilter,
)
from etcd_compute.scheduler.hoststate import HostState, ProviderUsage
from etcd_compute.scheduler.planner import NoRoom, plan
from etcd_compute.scheduler.weighers import CPUWeigher, RAMWeigher

REQUEST = {"VCPU": 1, "MEMORY_MB": 256}
SPREAD = [(RAMWeigher(), 1.0), (CPUWeigher(), 1.0)]
PACK = [(RAMWeigher(), -1.0), (CPUWeigher(), -1.0)]


def make_hosts(free: dict[str, int | dict[str, int]], **attrs) -> list[HostState]:
    """Host states as Nova's FakeHostState: {host: free VCPU (or {rc: free})}, one shared
    ProviderUsage, each host offering one allocation of REQUEST on itself."""
    free = {uuid: amounts if isinstance(amounts, dict)
            else {"VCPU": amounts, "MEMORY_MB": 256 * amounts}
            for uuid, amounts in free.items()}
    usage = ProviderUsage({
        uuid: {"resources": {rc: {"capacity": n, "used": 0} for rc, n in rcs.items()}}
        for uuid, rcs in free.items()})
    return [HostState(uuid=uuid, name=f"name-{uuid}", usage=usage,
                      options=[{uuid: {"resources": dict(REQUEST)}}], tree={uuid},
                      alive=True, **attrs)
            for uuid in free]


def by_name(hosts: list[HostState]) -> dict[str, HostState]:
    return {h.uuid: h for h in hosts}


def chosen(picks) -> list[str]:
    return [p.host.uuid for p in picks]


def test_virtual_depletion_spreads_the_instances_of_one_request():
    hosts = make_hosts({"a": 4, "b": 4, "c": 4})
    picks = plan(hosts, 6, [], SPREAD, PlanContext())
    assert Counter(chosen(picks)) == {"a": 2, "b": 2, "c": 2}
    assert {h.uuid: h.free["VCPU"] for h in hosts} == {"a": 2, "b": 2, "c": 2}
    assert [h.instances for h in hosts] == [2, 2, 2]


def test_each_pick_carries_the_allocations_it_will_claim():
    (pick,) = plan(make_hosts({"a": 2}), 1, [], SPREAD, PlanContext())
    assert pick.allocations == {"a": {"resources": REQUEST}}


def test_a_host_is_not_planned_beyond_its_free_capacity():
    hosts = make_hosts({"a": 2, "b": 1})
    with pytest.raises(NoRoom) as caught:
        plan(hosts, 4, [], PACK, PlanContext())
    report = caught.value.report
    assert (report.count, report.placed, report.candidates) == (4, 3, 2)
    assert report.filled_by_request == 2
    assert report.removed == []
    assert str(caught.value) == "room for 3 of 4"


def test_no_room_report_counts_hosts_removed_by_each_filter_in_order():
    hosts = make_hosts({"ok-but-busy": 4, "dead": 4, "dead-and-disabled": 4, "disabled": 4})
    named = by_name(hosts)
    named["dead"].alive = named["dead-and-disabled"].alive = False
    named["dead-and-disabled"].traits = named["disabled"].traits = {"COMPUTE_STATUS_DISABLED"}
    named["ok-but-busy"].instances = 3
    filters = [AliveFilter(), DisabledFilter(), MaxInstancesPerHostFilter()]
    with pytest.raises(NoRoom) as caught:
        plan(hosts, 1, filters, SPREAD, PlanContext(max_instances_per_host=3))
    report = caught.value.report
    # A host removed by an earlier filter is not counted again by a later one.
    assert report.removed == [("AliveFilter", AliveFilter.reason, 2),
                              ("DisabledFilter", DisabledFilter.reason, 1),
                              ("MaxInstancesPerHostFilter", MaxInstancesPerHostFilter.reason, 1)]
    assert (report.placed, report.candidates, report.filled_by_request) == (0, 4, 0)


def test_no_room_after_some_instances_counts_hosts_filled_by_the_request():
    hosts = make_hosts({"live": 1, "dead": 4})
    by_name(hosts)["dead"].alive = False
    with pytest.raises(NoRoom) as caught:
        plan(hosts, 2, [AliveFilter()], SPREAD, PlanContext())
    report = caught.value.report
    assert (report.count, report.placed, report.filled_by_request) == (2, 1, 1)
    assert report.removed == [("AliveFilter", AliveFilter.reason, 1)]


def test_planned_instances_count_against_max_instances_per_host():
    hosts = make_hosts({"a": 10})
    with pytest.raises(NoRoom) as caught:
        plan(hosts, 3, [MaxInstancesPerHostFilter()], SPREAD,
             PlanContext(max_instances_per_host=2))
    assert caught.value.report.placed == 2


def test_alternates_are_the_next_best_hosts_up_to_max_attempts_minus_one():
    hosts = make_hosts({"small": 1, "big": 8, "medium": 4, "large": 6})
    (pick,) = plan(hosts, 1, [], SPREAD, PlanContext(), max_attempts=3)
    assert pick.host.uuid == "big"
    assert [h.uuid for h, _ in pick.alternates] == ["large", "medium"]
    assert pick.alternates[0][1] == {"large": {"resources": REQUEST}}
    (alone,) = plan(make_hosts({"a": 2, "b": 2}), 1, [], SPREAD, PlanContext(), max_attempts=1)
    assert alone.alternates == []


def test_alternates_never_include_the_chosen_host_whatever_the_random_pick():
    for seed in range(30):
        hosts = make_hosts({"a": 8, "b": 7, "c": 6, "d": 5})
        (pick,) = plan(hosts, 1, [], SPREAD, PlanContext(), host_subset_size=4,
                       max_attempts=3, rng=random.Random(seed))
        alternates = [h.uuid for h, _ in pick.alternates]
        assert pick.host.uuid not in alternates
        assert len(alternates) == 2


def test_alternates_are_only_hosts_that_still_fit():
    hosts = make_hosts({"x": 1, "y": 1, "z": 1})
    first, second = plan(hosts, 2, [], SPREAD, PlanContext(), max_attempts=3)
    assert first.host.uuid == "x" and [h.uuid for h, _ in first.alternates] == ["y", "z"]
    # x is full after the first instance: not an alternate for the second.
    assert second.host.uuid == "y" and [h.uuid for h, _ in second.alternates] == ["z"]


def test_host_subset_size_1_always_takes_the_best():
    for seed in range(10):
        hosts = make_hosts({"a": 2, "b": 6, "c": 4})
        assert chosen(plan(hosts, 1, [], SPREAD, PlanContext(), host_subset_size=1,
                           rng=random.Random(seed))) == ["b"]


def test_host_subset_size_picks_at_random_among_the_best_n_only():
    seen = Counter()
    for seed in range(60):
        hosts = make_hosts({"a": 2, "b": 6, "c": 4, "d": 8, "e": 1})
        seen.update(chosen(plan(hosts, 1, [], SPREAD, PlanContext(), host_subset_size=2,
                                rng=random.Random(seed))))
    assert set(seen) == {"d", "b"}  # the two freest, each some of the time


def test_the_same_seed_gives_the_same_plan():
    def run(seed: int) -> list[str]:
        hosts = make_hosts({f"h{i}": 4 for i in range(8)})
        return chosen(plan(hosts, 5, [], SPREAD, PlanContext(), host_subset_size=8,
                           rng=random.Random(seed)))

    assert run(11) == run(11)
    assert len({tuple(run(seed)) for seed in range(5)}) > 1


def test_anti_affinity_spreads_the_request_and_records_its_members():
    hosts = make_hosts({"a": 8, "b": 8, "c": 8})
    context = PlanContext(policy="anti-affinity")
    picks = plan(hosts, 3, [AntiAffinityFilter()], PACK, context)  # pack alone would stack
    assert sorted(chosen(picks)) == ["a", "b", "c"]
    assert context.group_hosts == {"a": 1, "b": 1, "c": 1}
    with pytest.raises(NoRoom) as caught:
        plan(make_hosts({"a": 8, "b": 8, "c": 8}), 4, [AntiAffinityFilter()], PACK,
             PlanContext(policy="anti-affinity"))
    assert caught.value.report.removed == [("AntiAffinityFilter", AntiAffinityFilter.reason, 3)]


def test_anti_affinity_avoids_hosts_of_existing_members():
    context = PlanContext(policy="anti-affinity", group_hosts=Counter({"a": 1}))
    picks = plan(make_hosts({"a": 8, "b": 2}), 1, [AntiAffinityFilter()], SPREAD, context)
    assert chosen(picks) == ["b"]
    assert context.group_hosts == {"a": 1, "b": 1}


def test_affinity_keeps_the_request_on_the_first_chosen_host():
    hosts = make_hosts({"a": 8, "b": 8, "c": 8})
    context = PlanContext(policy="affinity")
    picks = plan(hosts, 3, [AffinityFilter()], SPREAD, context)  # spread alone would spread
    assert chosen(picks) == ["a", "a", "a"]
    assert context.group_hosts == {"a": 3}


def test_without_a_group_policy_group_hosts_stay_untouched():
    context = PlanContext()
    plan(make_hosts({"a": 8, "b": 8}), 2, [], SPREAD, context)
    assert context.group_hosts == Counter()


# ------------------------------------------------- incremental planning (issue 14)


def reference_plan(hosts, count, filters, weighers, context, host_subset_size, max_attempts,
                   rng):
    """The straightforward loop the Planner must agree with: every host filtered and
    weighed again for every instance."""
    from etcd_compute.scheduler.weighers import weigh

    picks = []
    for _ in range(count):
        remaining = [h for h in hosts if h.fitting_option() is not None]
        for host_filter in filters:
            remaining = [h for h in remaining if host_filter.host_passes(h, context)]
        if not remaining:
            return picks, "no room"
        weighed = [h for _, h in weigh(remaining, weighers, context)]
        chosen_host = rng.choice(weighed[:host_subset_size])
        allocations = chosen_host.fitting_option()
        chosen_host.usage.consume(allocations)
        chosen_host.instances += 1
        if context.policy:
            context.group_hosts[chosen_host.uuid] += 1
        alternates = [h.uuid for h in weighed if h is not chosen_host
                      and h.fitting_option() is not None][:max_attempts - 1]
        picks.append((chosen_host.uuid, alternates))
    return picks, None


@pytest.mark.parametrize("seed", range(12))
def test_incremental_planner_agrees_with_replanning_everything(seed):
    from etcd_compute.scheduler.planner import Planner

    source = random.Random(seed)
    free = {f"h{i:02d}": source.randint(0, 6) for i in range(source.randint(3, 40))}
    busy = {uuid: source.randint(0, 4) for uuid in free}
    dead = {uuid for uuid in free if source.random() < 0.2}
    policy = source.choice([None, None, "anti-affinity", "affinity"])
    filters = [AliveFilter(), MaxInstancesPerHostFilter(), AntiAffinityFilter(),
               AffinityFilter()]
    weighers = source.choice([SPREAD, PACK, [(RAMWeigher(), 2.0), (CPUWeigher(), -0.5)]])
    subset, attempts = source.randint(1, 4), source.randint(1, 4)
    count = source.randint(1, 30)

    def fresh():
        hosts = make_hosts(free)
        for host in hosts:
            host.instances, host.alive = busy[host.uuid], host.uuid not in dead
        return hosts, PlanContext(policy=policy, max_instances_per_host=5)

    hosts, context = fresh()
    expected = reference_plan(hosts, count, filters, weighers, context, subset, attempts,
                              random.Random(seed))
    hosts, context = fresh()
    planner = Planner(hosts, filters, weighers, subset, attempts, random.Random(seed))
    try:
        got = ([(p.host.uuid, [h.uuid for h, _ in p.alternates])
                for p in planner.place(count, context)], None)
    except NoRoom as exc:
        got = (expected[0][:exc.report.placed], "no room")
        assert exc.report.placed == len(expected[0])
    assert got == expected


class CountingWeigher(RAMWeigher):
    def __init__(self):
        self.calls = 0

    def raw_weight(self, host, context):
        self.calls += 1
        return super().raw_weight(host, context)


def test_after_each_pick_only_the_chosen_host_is_weighed_again():
    from etcd_compute.scheduler.planner import Planner

    weigher = CountingWeigher()
    hosts = make_hosts({f"h{i}": 8 for i in range(50)})
    Planner(hosts, [AliveFilter()], [(weigher, 1.0)]).place(10, PlanContext())
    assert weigher.calls == 50 + 9  # every host once, then the chosen one after each pick


def test_planners_of_two_request_shapes_see_each_others_picks():
    """The service plans several request shapes on one shared ProviderUsage."""
    from etcd_compute.scheduler.planner import Planner

    first = make_hosts({"a": 1})
    second = [HostState(uuid="a", name="name-a", usage=first[0].usage,
                        options=[{"a": {"resources": {"VCPU": 1}}}], tree={"a"}, alive=True)]
    one = Planner(first, [MaxInstancesPerHostFilter()], SPREAD)
    other = Planner(second, [MaxInstancesPerHostFilter()], SPREAD)
    (pick,) = one.place(1, PlanContext(max_instances_per_host=5))
    other.placed_elsewhere(pick.host.uuid, pick.allocations)
    assert second[0].instances == 1
    with pytest.raises(NoRoom):  # VCPU of "a" is gone for both shapes
        other.place(1, PlanContext(max_instances_per_host=5))

"""Why nothing fits, against the in-memory Placement: resource classes short everywhere,
constraints that exclude every provider, and how many hosts each filter removed.
(tests/scheduler/test_explain.py asks the same of a real Placement.)"""

from __future__ import annotations

import uuid as uuidlib

from etcd_compute.errors import PlacementError
from etcd_compute.scheduler.explain import (
    explain,
    filter_reasons,
    placement_reasons,
    unknown_trait,
)
from etcd_compute.scheduler.planner import FilterReport
from etcd_compute.scheduler.request import parse_query
from tests.unit.fakes import FakePlacement

AGG = "5b3a2c1d-0e9f-4a8b-8c7d-6e5f4a3b2c1d"


def add_provider(placement: FakePlacement, name: str, totals: dict[str, int],
                 traits: set[str] | None = None, aggregates: list[str] | None = None) -> str:
    uuid = str(uuidlib.uuid4())
    placement.ensure_provider(uuid, name)
    placement.set_inventory(uuid, {rc: {"total": n} for rc, n in totals.items()})
    if traits:
        placement.set_traits(uuid, traits)
    if aggregates:
        placement.set_aggregates(uuid, aggregates)
    return uuid


def use(placement: FakePlacement, rp: str, **resources: int) -> None:
    placement.claim(str(uuidlib.uuid4()), {rp: {"resources": resources}}, "p", "u")


class NoPlacement:
    """Any call is a failure: reasons that need no Placement question must not ask one."""

    def __getattr__(self, name):
        raise AssertionError(f"Placement was asked ({name})")


def test_a_class_nobody_has_enough_of_names_the_largest_free_amount():
    placement = FakePlacement()
    add_provider(placement, "small", {"VCPU": 4, "MEMORY_MB": 2048})
    busy = add_provider(placement, "busy", {"VCPU": 4, "MEMORY_MB": 4096})
    use(placement, busy, MEMORY_MB=3072)  # 1024 free
    add_provider(placement, "no-ram", {"VCPU": 4})
    reasons = placement_reasons(placement, parse_query("resources=VCPU:1,MEMORY_MB:4096"))
    assert reasons == ["resources=MEMORY_MB:4096: no resource provider has 4096 MEMORY_MB free "
                       "(largest free: 2048, on 2 provider(s) with some)"]


def test_a_class_nobody_has_any_of_is_named():
    placement = FakePlacement()
    full = add_provider(placement, "full", {"VCPU": 2, "VGPU": 1})
    use(placement, full, VGPU=1)
    reasons = placement_reasons(placement, parse_query("resources=VCPU:1,VGPU:1,CUSTOM_FPGA:1"))
    assert reasons == [
        "resources=CUSTOM_FPGA:1: no resource provider has any CUSTOM_FPGA free (none has "
        "inventory of it, or all of it is used)",
        "resources=VGPU:1: no resource provider has any VGPU free (none has inventory of it, "
        "or all of it is used)",
    ]


def test_classes_that_fit_separately_but_not_together():
    placement = FakePlacement()
    add_provider(placement, "cpu-rich", {"VCPU": 8, "MEMORY_MB": 512})
    add_provider(placement, "ram-rich", {"VCPU": 1, "MEMORY_MB": 8192})
    (reason,) = placement_reasons(placement, parse_query("resources=VCPU:2,MEMORY_MB:1024"))
    assert reason.startswith("no resource provider has MEMORY_MB:1024, VCPU:2 free together")


def test_a_required_trait_that_excludes_everyone_is_named():
    placement = FakePlacement()
    add_provider(placement, "plain", {"VCPU": 4}, traits={"HW_CPU_X86_AVX2"})
    # The only GPU host has no room: the trait still excludes every provider with room.
    add_provider(placement, "gpu-full", {"VCPU": 1}, traits={"CUSTOM_GPU"})
    reasons = placement_reasons(
        placement, parse_query("resources=VCPU:2&required=CUSTOM_GPU,HW_CPU_X86_AVX2"))
    assert reasons == ["required=CUSTOM_GPU: no provider with enough free resources has "
                       "trait CUSTOM_GPU"]


def test_a_forbidden_trait_everyone_has_and_an_aggregate_nobody_is_in():
    placement = FakePlacement()
    add_provider(placement, "slow-1", {"VCPU": 4}, traits={"CUSTOM_SLOW"})
    add_provider(placement, "slow-2", {"VCPU": 4}, traits={"CUSTOM_SLOW"})
    reasons = placement_reasons(
        placement, parse_query(f"resources=VCPU:1&required=!CUSTOM_SLOW&member_of={AGG}"))
    assert reasons == [
        "required=!CUSTOM_SLOW: every provider with enough free resources has trait CUSTOM_SLOW",
        f"member_of={AGG}: no provider with enough free resources is in aggregate {AGG}",
    ]


def test_constraints_that_exclude_only_together():
    placement = FakePlacement()
    add_provider(placement, "a", {"VCPU": 1}, traits={"CUSTOM_A"})
    add_provider(placement, "b", {"VCPU": 1}, traits={"CUSTOM_B"})
    (reason,) = placement_reasons(
        placement, parse_query("resources=VCPU:1&required=CUSTOM_A&required=CUSTOM_B"))
    assert reason == ("required=CUSTOM_A&required=CUSTOM_B: each constraint alone leaves a "
                      "provider with enough free resources, but together they exclude every one")


class UnknownTraitPlacement(FakePlacement):
    """Real Placement answers 400 for a trait that was never created."""

    def allocation_candidates(self, query: str):
        if "CUSTOM_NEVER" in query:
            raise PlacementError("400 Bad Request: No such trait(s): CUSTOM_NEVER", 400)
        return super().allocation_candidates(query)


def test_a_trait_placement_never_heard_of_excludes_everyone():
    placement = UnknownTraitPlacement()
    add_provider(placement, "plain", {"VCPU": 4})
    reasons = placement_reasons(placement, parse_query("resources=VCPU:1&required=CUSTOM_NEVER"))
    assert reasons == ["required=CUSTOM_NEVER: no provider with enough free resources has "
                       "trait CUSTOM_NEVER"]


def test_unknown_trait_is_only_placements_400_no_such_trait():
    assert unknown_trait(PlacementError("No such trait(s): CUSTOM_X", 400))
    assert not unknown_trait(PlacementError("No such trait(s): CUSTOM_X", 500))
    assert not unknown_trait(PlacementError("Invalid query string", 400))


def report(**fields) -> FilterReport:
    base = {"count": 1, "placed": 0, "candidates": 4, "filled_by_request": 0, "removed": []}
    return FilterReport(**{**base, **fields})


def test_filter_reasons_list_what_each_filter_removed_and_skip_zeros():
    removed = [("AliveFilter", "no heartbeat", 2), ("DisabledFilter", "disabled", 0),
               ("MaxInstancesPerHostFilter", "at the limit", 1)]
    assert filter_reasons(report(removed=removed), limit_reached=False) == [
        "AliveFilter removed 2 host(s): no heartbeat",
        "MaxInstancesPerHostFilter removed 1 host(s): at the limit",
    ]


def test_filter_reasons_for_a_batch_that_did_not_fit_and_a_reached_limit():
    reasons = filter_reasons(report(count=5, placed=3, candidates=2, filled_by_request=2),
                             limit_reached=True)
    assert reasons == [
        "room for only 3 of the 5 instances requested; nothing was claimed",
        "2 of 2 candidate host(s) would be full with the earlier instances of this request",
        "only 2 candidate host(s) considered (scheduler.candidate_limit); raise it to "
        "consider more",
    ]


def test_explain_asks_placement_only_when_the_planner_had_no_candidates():
    request = parse_query("resources=VCPU:1")
    assert explain(NoPlacement(), request, report(removed=[("AliveFilter", "dead", 1)])) == [
        "AliveFilter removed 1 host(s): dead"]
    placement = FakePlacement()
    add_provider(placement, "tiny", {"MEMORY_MB": 512})
    assert explain(placement, request, None) == [
        "resources=VCPU:1: no resource provider has any VCPU free (none has inventory of it, "
        "or all of it is used)"]

"""The service's candidates: asked once per shape while young, what we claimed since taken
off, everything dropped after a refused claim."""

from __future__ import annotations

from etcd_compute.scheduler.candidates import CandidateCache, extra_params
from etcd_compute.scheduler.hoststate import ProviderUsage
from etcd_compute.scheduler.request import parse_query
from tests.unit.fakes import FakePlacement

REQUEST = parse_query("resources=VCPU:1")


class Clock:
    now = 100.0

    def __call__(self) -> float:
        return self.now


def placement_with_one_host() -> FakePlacement:
    placement = FakePlacement()
    placement.ensure_provider("rp", "hv")
    placement.set_inventory("rp", {"VCPU": {"total": 4}})
    return placement


def test_an_answer_is_reused_while_young_and_big_enough():
    placement, clock = placement_with_one_host(), Clock()
    asked = []
    real = placement.allocation_candidates
    placement.allocation_candidates = lambda q: asked.append(q) or real(q)
    candidates = CandidateCache(placement, max_age=2.0, clock=clock)
    first = candidates.get(REQUEST, 1)  # one host: the answer is as long as the limit
    assert candidates.get(REQUEST, 1) is first
    second = candidates.get(REQUEST, 2)  # more candidates needed: asked again
    assert second is not first
    assert candidates.get(REQUEST, 50) is second  # it was short: there are no more to get
    clock.now += 2.5
    candidates.get(REQUEST, 2)
    assert len(asked) == 3 and (candidates.queries, candidates.reused) == (3, 2)
    candidates.get(parse_query("resources=VCPU:2"), 10)  # another shape
    assert len(asked) == 4


def test_what_we_claimed_since_an_answer_is_taken_off_its_capacity():
    placement, clock = placement_with_one_host(), Clock()
    candidates = CandidateCache(placement, max_age=2.0, clock=clock)
    answer = candidates.get(REQUEST, 10)
    clock.now += 0.5
    candidates.claimed([{"rp": {"resources": {"VCPU": 3}}}])
    usage = ProviderUsage({})
    usage.add(answer.candidates["provider_summaries"], answer.asked_at)
    usage.take(candidates.claims)
    assert usage.free["rp"]["VCPU"] == 1
    # An answer asked after the claim already has it: nothing taken off twice.
    clock.now += 5
    fresh = candidates.get(REQUEST, 10)
    later = ProviderUsage({})
    later.add(fresh.candidates["provider_summaries"], fresh.asked_at)
    later.take(candidates.claims)
    assert later.free["rp"]["VCPU"] == 4  # (the fake Placement never saw that claim)


def test_a_refused_claim_drops_everything_kept():
    placement, clock = placement_with_one_host(), Clock()
    candidates = CandidateCache(placement, max_age=2.0, clock=clock)
    first = candidates.get(REQUEST, 10)
    candidates.claimed([{"rp": {"resources": {"VCPU": 1}}}])
    candidates.forget()
    assert candidates.claims == [] and candidates.get(REQUEST, 10) is not first


def test_max_age_zero_asks_every_time():
    placement, clock = placement_with_one_host(), Clock()
    candidates = CandidateCache(placement, max_age=0.0, clock=clock)
    candidates.get(REQUEST, 10)
    clock.now += 0.001
    candidates.get(REQUEST, 10)
    assert candidates.queries == 2


def test_the_schedulers_host_traits_go_to_every_query_as_root_required():
    placement = placement_with_one_host()
    asked = []
    real = placement.allocation_candidates
    placement.allocation_candidates = lambda q: asked.append(q) or real(q)
    candidates = CandidateCache(placement, max_age=0.0, root_required={"CUSTOM_B", "CUSTOM_A"})
    assert candidates.get(REQUEST, 1).candidates["allocation_requests"] == []  # rp lacks them
    candidates.get(REQUEST, 1, aggregates=["agg"])
    assert [q.split("&")[1:-1] for q in asked] == [
        ["root_required=CUSTOM_A,CUSTOM_B"],
        ["root_required=CUSTOM_A,CUSTOM_B", "member_of=in:agg"]]
    placement.set_traits("rp", {"CUSTOM_A", "CUSTOM_B"})
    assert candidates.get(REQUEST, 1).candidates["allocation_requests"]
    assert extra_params(()) == [] and extra_params((), ["a", "b"]) == [("member_of", "in:a,b")]

"""Claims: one consumer is a PUT for a new consumer, several one atomic POST, unclaim is best
effort, a move replaces a claim checked against the generation it read (FakePlacement)."""

from __future__ import annotations

import uuid as uuidlib
from typing import Any

import pytest

from etcd_compute import claims
from etcd_compute.errors import ConflictError, EtcdUnavailable, NotFound, ServiceUnavailable
from tests.unit.fakes import FakePlacement

A, B = str(uuidlib.uuid4()), str(uuidlib.uuid4())
SETTINGS = {"project_id": "p", "user_id": "u", "consumer_type": "INSTANCE"}


def placement_with_hosts(vcpus: int = 4) -> FakePlacement:
    placement = FakePlacement()
    for uuid, name in ((A, "a"), (B, "b")):
        placement.ensure_provider(uuid, name)
        placement.set_inventory(uuid, {"VCPU": {"total": vcpus}})
    return placement


def on(rp: str, vcpus: int = 1) -> dict[str, Any]:
    return {rp: {"resources": {"VCPU": vcpus}}}


def test_one_consumer_is_claimed_with_a_put_for_a_new_consumer():
    placement = placement_with_hosts()
    claims.claim(placement, {"c1": on(A)}, SETTINGS)
    assert placement.calls[-1] == "claim c1"
    assert placement.get_allocations("c1") == {"allocations": on(A), "consumer_generation": 1,
                                               "project_id": "p", "user_id": "u"}
    assert placement.consumers["c1"]["project_id"] == "p"


def test_claiming_a_consumer_that_already_holds_allocations_is_refused():
    placement = placement_with_hosts()
    claims.claim(placement, {"c1": on(A)}, SETTINGS)
    with pytest.raises(ConflictError) as caught:
        claims.claim(placement, {"c1": on(B)}, SETTINGS)  # generation None: must be new
    assert caught.value.code == "placement.concurrent_update"
    assert placement.get_allocations("c1")["allocations"] == on(A)  # not overwritten


def test_several_consumers_are_claimed_in_one_request():
    placement = placement_with_hosts()
    claims.claim(placement, {"c1": on(A), "c2": on(B), "c3": on(A)}, SETTINGS)
    assert [call for call in placement.calls if call.startswith("claim")] == ["claim_many 3"]
    assert set(placement.consumers) == {"c1", "c2", "c3"}


def test_several_consumers_are_all_or_nothing():
    placement = placement_with_hosts(vcpus=2)
    with pytest.raises(ConflictError):
        claims.claim(placement, {"c1": on(A), "c2": on(A), "c3": on(A)}, SETTINGS)
    assert placement.consumers == {}
    assert placement.get_usages(A) == {"VCPU": 0}


def test_a_claim_that_does_not_fit_holds_nothing():
    placement = placement_with_hosts(vcpus=1)
    with pytest.raises(ConflictError):
        claims.claim(placement, {"c1": on(A, 2)}, SETTINGS)
    assert placement.consumers == {}


class FlakyPlacement(FakePlacement):
    """Placement that cannot be reached for some consumers' deletes."""

    def __init__(self, unreachable: set[str]):
        super().__init__()
        self.unreachable = unreachable

    def delete_allocations(self, consumer: str) -> bool:
        if consumer in self.unreachable:
            raise ServiceUnavailable("Placement at x is unreachable")
        return super().delete_allocations(consumer)


def test_unclaim_deletes_what_it_can_and_returns_the_rest():
    placement = FlakyPlacement({"c2"})
    placement.ensure_provider(A, "a")
    placement.set_inventory(A, {"VCPU": {"total": 4}})
    claims.claim(placement, {"c1": on(A), "c2": on(A), "c3": on(A)}, SETTINGS)
    assert claims.unclaim(placement, ["c1", "c2", "c3"]) == ["c2"]
    assert set(placement.consumers) == {"c2"}


def test_unclaim_of_consumers_without_allocations_is_not_a_failure():
    placement = placement_with_hosts()
    assert claims.unclaim(placement, ["never-claimed"]) == []
    assert claims.unclaim(placement, []) == []


def test_unclaim_does_not_swallow_programming_errors():
    placement = placement_with_hosts()
    placement.delete_allocations = lambda consumer: 1 / 0  # type: ignore[method-assign]
    with pytest.raises(ZeroDivisionError):
        claims.unclaim(placement, ["c1"])


def test_move_replaces_the_allocation_in_one_request():
    placement = placement_with_hosts()
    claims.claim(placement, {"c1": on(A)}, SETTINGS)
    claims.move(placement, "c1", on(B), "p", "u")
    assert placement.get_allocations("c1") == {"allocations": on(B), "consumer_generation": 2,
                                               "project_id": "p", "user_id": "u"}
    assert placement.get_usages(A) == {"VCPU": 0} and placement.get_usages(B) == {"VCPU": 1}


def test_move_passes_the_generation_it_read():
    placement = placement_with_hosts()
    claims.claim(placement, {"c1": on(A)}, SETTINGS)
    seen: list[Any] = []
    original = placement.claim

    def spy(*args: Any, **kwargs: Any) -> None:
        seen.append(kwargs.get("consumer_generation"))
        original(*args, **kwargs)

    placement.claim = spy  # type: ignore[method-assign]
    claims.move(placement, "c1", on(B), "p", "u")
    assert seen == [1]


class RacingPlacement(FakePlacement):
    """Someone else moves the consumer between our read and our write."""

    def get_allocations(self, consumer: str) -> dict[str, Any]:
        read = super().get_allocations(consumer)
        current = self.consumers[consumer]
        current["consumer_generation"] += 1  # another writer got there first
        return read


def test_move_fails_on_a_stale_generation_and_keeps_the_claim():
    placement = RacingPlacement()
    for uuid in (A, B):
        placement.ensure_provider(uuid, uuid)
        placement.set_inventory(uuid, {"VCPU": {"total": 4}})
    claims.claim(placement, {"c1": on(A)}, SETTINGS)
    with pytest.raises(ConflictError) as caught:
        claims.move(placement, "c1", on(B), "p", "u")
    assert caught.value.code == "placement.concurrent_update"
    assert placement.consumers["c1"]["allocations"] == on(A)


def test_move_to_a_host_without_room_keeps_the_old_claim():
    placement = placement_with_hosts(vcpus=1)
    claims.claim(placement, {"c1": on(A), "c2": on(B)}, SETTINGS)
    with pytest.raises(ConflictError):
        claims.move(placement, "c1", on(B), "p", "u")
    assert placement.get_allocations("c1")["allocations"] == on(A)


def test_move_returns_the_generation_an_undo_needs():
    placement = placement_with_hosts()
    claims.claim(placement, {"c1": on(A)}, SETTINGS)
    generation = claims.move(placement, "c1", on(B), "p", "u")
    assert claims.undo_move(placement, "c1", on(A), generation, "p", "u")
    assert placement.get_allocations("c1")["allocations"] == on(A)


def test_an_undo_after_someone_else_touched_the_claim_leaves_it():
    placement = placement_with_hosts()
    claims.claim(placement, {"c1": on(A)}, SETTINGS)
    generation = claims.move(placement, "c1", on(B), "p", "u")
    placement.delete_allocations("c1")  # a destroy freed it meanwhile
    assert not claims.undo_move(placement, "c1", on(A), generation, "p", "u")
    assert placement.get_allocations("c1")["allocations"] == {}
    assert not claims.undo_move(placement, "c1", {}, generation, "p", "u")


def test_an_undo_to_nothing_releases_the_claim():
    placement = placement_with_hosts()
    claims.claim(placement, {"c1": on(A)}, SETTINGS)
    generation = claims.move(placement, "c1", on(B), "p", "u")
    assert claims.undo_move(placement, "c1", {}, generation, "p", "u")
    assert placement.get_usages(B) == {"VCPU": 0}


def test_claims_belong_to_the_owners_given_else_to_the_configured_project():
    placement = placement_with_hosts()
    one, two, three = (str(uuidlib.uuid4()) for _ in range(3))
    claims.claim(placement, {one: on(A)}, SETTINGS, {one: ("demo", "ann")})
    claims.claim(placement, {two: on(A), three: on(B)}, SETTINGS, {two: ("alt", "bob")})
    assert [(placement.consumers[c]["project_id"], placement.consumers[c]["user_id"])
            for c in (one, two, three)] == [("demo", "ann"), ("alt", "bob"), ("p", "u")]
    assert placement.project_usages("alt", "INSTANCE") == {"consumer_count": 1, "VCPU": 1}


def test_several_claims_move_in_one_request_or_none_does():
    placement = FakePlacement()
    for rp in ("a", "b"):
        placement.ensure_provider(rp, rp)
        placement.set_inventory(rp, {"VCPU": {"total": 2}})
    one, two = {"a": {"resources": {"VCPU": 1}}}, {"b": {"resources": {"VCPU": 1}}}
    placement.claim("x", one, "p", "u")
    placement.claim("y", one, "p", "u")
    generations = claims.move_many(placement, [("x", two, "p", "u"), ("y", two, "p", "u")])
    assert [c for c in placement.calls if c.startswith("replace_many")] == ["replace_many 2"]
    assert placement.get_usages("b")["VCPU"] == 2 and placement.get_usages("a")["VCPU"] == 0
    assert generations == {"x": 2, "y": 2}
    # No room for a third on b: nothing moves.
    placement.claim("z", one, "p", "u")
    with pytest.raises(ConflictError):
        claims.move_many(placement, [("z", two, "p", "u")])
    assert placement.get_usages("a")["VCPU"] == 1


# -- a move to another host (a migration): both hosts held while it runs ----------------------


def test_a_move_holds_the_destination_for_the_instance_and_the_source_for_the_migration():
    placement = placement_with_hosts()
    instance, migration = str(uuidlib.uuid4()), str(uuidlib.uuid4())
    placement.claim(instance, on(A, 2), "p", "u")
    held, generation = claims.hold_source(placement, instance, migration, on(B, 2))
    assert held == on(A, 2) and generation == 2
    assert placement.get_allocations(instance)["allocations"] == on(B, 2)
    assert placement.get_allocations(migration)["allocations"] == on(A, 2)
    assert placement.consumers[migration]["consumer_type"] == "MIGRATION"
    assert placement.calls[-1] == "replace_many 2"  # one request
    assert placement.consumers[migration]["project_id"] == "p"  # the instance's owner
    assert claims.release_hold(placement, migration) is True
    assert placement.get_usages(A)["VCPU"] == 0 and placement.get_usages(B)["VCPU"] == 2


def test_a_move_without_room_there_or_to_a_changed_claim_changes_nothing():
    placement = placement_with_hosts(vcpus=2)
    instance, other = str(uuidlib.uuid4()), str(uuidlib.uuid4())
    placement.claim(instance, on(A, 2), "p", "u")
    placement.claim(other, on(B, 1), "p", "u")
    with pytest.raises(ConflictError):
        claims.hold_source(placement, instance, str(uuidlib.uuid4()), on(B, 2))
    assert placement.get_allocations(instance)["allocations"] == on(A, 2)
    assert set(placement.consumers) == {instance, other}
    with pytest.raises(NotFound, match="holds no claim"):
        claims.hold_source(placement, str(uuidlib.uuid4()), str(uuidlib.uuid4()), on(B))


def test_a_move_called_off_gives_the_source_back_in_one_request_once():
    placement = placement_with_hosts()
    instance, migration = str(uuidlib.uuid4()), str(uuidlib.uuid4())
    placement.claim(instance, on(A, 2), "p", "u")
    claims.hold_source(placement, instance, migration, on(B, 2))
    assert claims.revert_holding(placement, instance, migration) == 3
    assert placement.calls[-1] == "replace_many 2"
    assert placement.get_allocations(instance)["allocations"] == on(A, 2)
    assert migration not in placement.consumers
    assert placement.get_usages(B)["VCPU"] == 0
    with pytest.raises(NotFound, match="holds nothing"):  # done already
        claims.revert_holding(placement, instance, migration)


def held_resize(placement: FakePlacement, hold: str = "m") -> tuple[dict[str, Any], int]:
    placement.claim("i", on(A, 1), "proj", "usr")
    return claims.resize_holding(placement, "i", A, {"VCPU": 2}, hold)


def test_a_held_resize_takes_the_new_size_and_keeps_the_old_under_the_migration():
    placement = placement_with_hosts()
    old, generation = held_resize(placement)
    assert old == on(A, 1) and generation == 2
    assert placement.calls[-1] == "replace_many 2"  # one atomic request
    assert placement.get_allocations("i")["allocations"] == on(A, 2)
    hold = placement.consumers["m"]
    assert hold["allocations"] == on(A, 1) and hold["consumer_type"] == claims.MIGRATION
    assert (hold["project_id"], hold["user_id"]) == ("proj", "usr")
    assert placement.get_usages(A)["VCPU"] == 3
    # The project's instances hold the new size; the old one is counted apart.
    assert placement.project_usages("proj", "INSTANCE") == {"consumer_count": 1, "VCPU": 2}


def test_a_held_resize_needs_room_for_both_sizes():
    placement = placement_with_hosts(vcpus=2)
    with pytest.raises(ConflictError):
        held_resize(placement)
    assert placement.get_allocations("i")["allocations"] == on(A, 1)
    assert "m" not in placement.consumers


def test_a_held_resize_refuses_a_claim_not_on_its_host():
    placement = placement_with_hosts()
    placement.claim("i", on(B, 1), "proj", "usr")
    with pytest.raises(ConflictError) as refused:
        claims.resize_holding(placement, "i", A, {"VCPU": 2}, "m")
    assert refused.value.code == claims.ELSEWHERE and "m" not in placement.consumers


def test_undo_of_a_held_resize_puts_the_old_size_back_and_frees_the_hold():
    placement = placement_with_hosts()
    old, generation = held_resize(placement)
    assert claims.undo_holding(placement, "i", old, generation, "m")
    assert placement.get_allocations("i")["allocations"] == on(A, 1)
    assert "m" not in placement.consumers and placement.get_usages(A)["VCPU"] == 1


def test_undo_after_someone_else_wrote_keeps_their_claim_and_frees_the_hold():
    placement = placement_with_hosts()
    old, generation = held_resize(placement)
    placement.delete_allocations("i")  # a destroy won
    assert not claims.undo_holding(placement, "i", old, generation, "m")
    assert placement.consumers == {}


def test_revert_moves_the_held_size_back_in_one_request():
    placement = placement_with_hosts(vcpus=3)
    old, _ = held_resize(placement)
    assert claims.revert_holding(placement, "i", "m", old) == 3
    assert placement.calls[-1] == "replace_many 2"
    assert placement.get_allocations("i")["allocations"] == on(A, 1)
    assert "m" not in placement.consumers and placement.get_usages(A)["VCPU"] == 1


def test_revert_without_a_hold_claims_the_old_size_again():
    placement = placement_with_hosts()
    old, _ = held_resize(placement)
    assert claims.release_hold(placement, "m")
    claims.revert_holding(placement, "i", "m", old)
    assert placement.get_allocations("i")["allocations"] == on(A, 1)


def test_confirm_frees_the_hold_once():
    placement = placement_with_hosts()
    held_resize(placement)
    assert claims.release_hold(placement, "m") and not claims.release_hold(placement, "m")
    assert placement.get_allocations("i")["allocations"] == on(A, 2)


def test_a_failed_held_resize_restores_the_old_size_and_frees_the_hold_in_one_request():
    placement = placement_with_hosts()
    old, _ = held_resize(placement)
    assert claims.restore(placement, "i", A, {"VCPU": 2}, old, hold="m")
    assert placement.calls[-1] == "replace_many 2"
    assert placement.get_allocations("i")["allocations"] == on(A, 1)
    assert "m" not in placement.consumers


def test_a_restore_that_finds_another_claim_still_frees_the_hold():
    placement = placement_with_hosts()
    old, _ = held_resize(placement)
    assert not claims.restore(placement, "i", A, {"VCPU": 3}, old, hold="m")
    assert placement.get_allocations("i")["allocations"] == on(A, 2)
    assert "m" not in placement.consumers


# --- what a host may act on: the one check ----------------------------------------------------

ASKED = {"VCPU": 2, "MEMORY_MB": 512}


@pytest.mark.parametrize(("allocations", "verdict"), [
    ({A: {"resources": {"VCPU": 2, "MEMORY_MB": 512}}}, claims.HELD),
    ({}, claims.MISSING),
    ({B: {"resources": {"VCPU": 2, "MEMORY_MB": 512}}}, claims.OTHER_HOST),
    # The amounts add up to what is asked, but B holds the memory: not A's claim.
    ({A: {"resources": {"VCPU": 2}}, B: {"resources": {"MEMORY_MB": 512}}}, claims.SPLIT),
    ({A: {"resources": {"VCPU": 2, "MEMORY_MB": 512}}, B: {"resources": {"VCPU": 1}}},
     claims.SPLIT),
    # A claim that merely covers what is asked is not it: exact amounts per class.
    ({A: {"resources": {"VCPU": 4, "MEMORY_MB": 512}}}, claims.DIFFERENT),
    ({A: {"resources": {"VCPU": 2, "MEMORY_MB": 512, "DISK_GB": 1}}}, claims.DIFFERENT),
    ({A: {"resources": {"VCPU": 2, "MEMORY_MB": 256}}}, claims.DIFFERENT),
    ({A: {"resources": {"VCPU": 2}}}, claims.DIFFERENT),
])
def test_a_host_may_act_only_on_its_claim_alone_at_exactly_the_amounts_asked(allocations,
                                                                            verdict):
    holding = claims.judge(allocations, A, ASKED)
    assert holding.verdict == verdict
    assert holding.held == (verdict == claims.HELD)
    assert (holding.why() == "") == holding.held


def test_what_a_refusal_says():
    assert claims.judge({}, A, ASKED).why() == "Placement holds no claim for this instance"
    assert claims.judge(on(B), A, ASKED).why() == \
        f"the instance is claimed on {B}, not on this host"
    assert claims.judge({**on(A), **on(B)}, A, ASKED).why() == (
        f"the claim is split between this host (VCPU:1) and {B}: an instance's claim is on "
        "its host alone")
    assert claims.judge(on(A), A, ASKED).why() == (
        "the spec asks for MEMORY_MB:512,VCPU:2 but Placement holds VCPU:1 for it here")


def test_holding_judges_what_placement_holds_now():
    placement = placement_with_hosts()
    claims.claim(placement, {"c1": on(A, 2)}, SETTINGS)
    assert claims.holding(placement, "c1", A, {"VCPU": 2}).held
    assert claims.holding(placement, "c1", B, {"VCPU": 2}).verdict == claims.OTHER_HOST
    assert claims.holding(placement, "c2", A, {"VCPU": 2}).verdict == claims.MISSING


def test_a_host_frees_a_claim_only_when_it_holds_all_of_it():
    placement = placement_with_hosts()
    claims.claim(placement, {"mine": on(A), "theirs": on(B)}, SETTINGS)
    placement.claim("split", {**on(A), **on(B)}, "p", "u")
    assert not claims.free_here(placement, "theirs", A)
    assert not claims.free_here(placement, "split", A)
    assert not claims.free_here(placement, "nothing", A)
    assert claims.free_here(placement, "mine", A)
    assert set(placement.consumers) == {"theirs", "split"}


def test_a_claim_that_moved_between_the_read_and_the_free_is_left(monkeypatch):
    placement = placement_with_hosts()
    claims.claim(placement, {"c1": on(A)}, SETTINGS)
    read = placement.get_allocations

    def read_then_moved(consumer: str) -> dict[str, Any]:
        seen = read(consumer)
        monkeypatch.setattr(placement, "get_allocations", read)
        claims.move(placement, consumer, on(B), "p", "u")  # the controller, meanwhile
        return seen

    monkeypatch.setattr(placement, "get_allocations", read_then_moved)
    assert not claims.free_here(placement, "c1", A)
    assert placement.get_allocations("c1")["allocations"] == on(B)


def test_a_failed_resize_puts_the_old_size_back_only_from_the_new_size_on_its_host():
    placement = placement_with_hosts()
    claims.claim(placement, {"c1": on(A, 2)}, SETTINGS)
    assert not claims.restore(placement, "c1", B, {"VCPU": 2}, on(B, 1))  # not B's
    assert not claims.restore(placement, "c1", A, {"VCPU": 3}, on(A, 1))  # not the new size
    assert claims.restore(placement, "c1", A, {"VCPU": 2}, on(A, 1))
    assert placement.get_allocations("c1")["allocations"] == on(A, 1)


# --- written_or_undone: the one clean-up after a claim whose etcd write does not happen ----


def test_a_write_that_happens_keeps_its_claim():
    undone: list[int] = []
    assert claims.written_or_undone(lambda: 7, lambda: undone.append(1)) == 7
    assert undone == []


def test_a_write_whose_compare_failed_undoes_its_claim():
    undone: list[int] = []
    assert claims.written_or_undone(lambda: None, lambda: undone.append(1)) is None
    assert undone == [1]


@pytest.mark.parametrize("failure", [EtcdUnavailable("etcd: unreachable"),
                                     KeyboardInterrupt(), ValueError("a bug")])
def test_a_write_that_raises_undoes_its_claim_and_raises(failure):
    undone: list[int] = []

    def write() -> int:
        raise failure

    with pytest.raises(type(failure)):
        claims.written_or_undone(write, lambda: undone.append(1))
    assert undone == [1]


def test_an_undo_that_fails_is_logged_and_the_writes_error_raised(caplog):
    def write() -> int:
        raise EtcdUnavailable("etcd: unreachable")

    def undo() -> None:
        raise ConflictError("changed since", 409)

    with pytest.raises(EtcdUnavailable):
        claims.written_or_undone(write, undo)
    assert "could not be undone: changed since" in caplog.text
    assert claims.written_or_undone(lambda: None, undo) is None

"""A claim moved for an etcd change that then failed is put back only if nobody touched it
since (real Placement: consumer generations)."""

from __future__ import annotations

import uuid as uuidlib

from etcd_compute import claims
from tests.scheduler.conftest import add_host

RESOURCES = {"VCPU": 1, "MEMORY_MB": 64, "DISK_GB": 1}


def on(host: str) -> dict:
    return {host: {"resources": dict(RESOURCES)}}


def test_an_untouched_move_is_undone_and_a_freed_claim_stays_freed(placement):
    here, there = add_host(placement, None, "here"), add_host(placement, None, "there")
    moved, freed = str(uuidlib.uuid4()), str(uuidlib.uuid4())
    for consumer in (moved, freed):
        placement.claim(consumer, on(here), "p", "u")

    generation = claims.move(placement, moved, on(there), "p", "u")
    assert set(placement.get_allocations(moved)["allocations"]) == {there}
    assert claims.undo_move(placement, moved, on(here), generation, "p", "u")
    assert set(placement.get_allocations(moved)["allocations"]) == {here}

    generation = claims.move(placement, freed, on(there), "p", "u")
    placement.delete_allocations(freed)  # a destroy got in after the move
    assert not claims.undo_move(placement, freed, on(here), generation, "p", "u")
    assert placement.get_allocations(freed)["allocations"] == {}
    assert placement.get_usages(here)["VCPU"] == 1  # only `moved` is back


def test_an_undo_to_nothing_releases_the_moved_claim(placement):
    here, there = add_host(placement, None, "here"), add_host(placement, None, "there")
    consumer = str(uuidlib.uuid4())
    placement.claim(consumer, on(here), "p", "u")
    generation = claims.move(placement, consumer, on(there), "p", "u")
    assert claims.undo_move(placement, consumer, {}, generation, "p", "u")
    assert placement.get_allocations(consumer)["allocations"] == {}
    assert placement.get_usages(there)["VCPU"] == 0

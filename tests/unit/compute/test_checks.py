"""compute/checks.py: a spec with no record is checked before anything is written; a
scheduled one's claim is checked beside its image fetch (`verified`)."""

from __future__ import annotations

import concurrent.futures
import uuid as uuidlib

import pytest

from etcd_compute import claims, messages
from etcd_compute.compute.checks import BUILD, REFUSED, ClaimChecks, check_unrecorded, verified
from etcd_compute.errors import PlacementUnavailable
from etcd_compute.instances import records
from tests.support import make_spec
from tests.unit.fakes import FakePlacement, FakePool, FakeStore

HERE, THERE = str(uuidlib.uuid4()), str(uuidlib.uuid4())


def setup(claim: dict | None):
    """A spec for HERE written with no record; `claim` its allocations in Placement."""
    store, placement = FakeStore(), FakePlacement()
    for rp in (HERE, THERE):
        placement.ensure_provider(rp, rp[:8])
        placement.set_inventory(rp, {"VCPU": {"total": 4}, "MEMORY_MB": {"total": 1024},
                                     "DISK_GB": {"total": 10}, "CUSTOM_X": {"total": 1}})
    spec = make_spec(HERE)
    if claim is not None:
        placement.claim(spec["uuid"], claim, "p", "u")
    store.put(messages.INSTANCE_SPEC, store.keys.spec(HERE, spec["uuid"]), spec)
    revision = store.get(store.keys.spec(HERE, spec["uuid"])).mod_revision
    return store, placement, spec, revision


def on(rp: str, **resources: int) -> dict:
    return {rp: {"resources": resources}}


def test_a_spec_claimed_here_alone_with_its_resources_is_built():
    store, placement, spec, revision = setup(on(HERE, VCPU=1, MEMORY_MB=64, DISK_GB=1))
    assert check_unrecorded(store, placement, spec, revision) == BUILD
    assert records.read_record(store, HERE, spec["uuid"]).record is None  # nothing written


def test_a_spec_without_a_claim_ends_in_error():
    store, placement, spec, revision = setup(None)
    assert check_unrecorded(store, placement, spec, revision) == REFUSED
    read = records.read_record(store, HERE, spec["uuid"])
    assert read.state == "ERROR"
    assert read.record["error"] == "refused: Placement holds no claim for this instance"
    assert store.get(store.keys.spec(HERE, spec["uuid"])) is None


def test_a_stray_copy_claimed_elsewhere_is_dropped_without_a_record():
    store, placement, spec, revision = setup(on(THERE, VCPU=1, MEMORY_MB=64, DISK_GB=1))
    assert check_unrecorded(store, placement, spec, revision) == REFUSED
    assert store.get(store.keys.spec(HERE, spec["uuid"])) is None
    assert records.read_record(store, HERE, spec["uuid"]).record is None
    assert set(placement.get_allocations(spec["uuid"])["allocations"]) == {THERE}


def test_a_claim_split_with_another_host_is_refused_and_left_to_the_operator():
    # VCPU here, memory and disk on another host: this host holds part of it only.
    split = {**on(HERE, VCPU=1), **on(THERE, MEMORY_MB=64, DISK_GB=1)}
    store, placement, spec, revision = setup(split)
    assert check_unrecorded(store, placement, spec, revision) == REFUSED
    error = records.read_record(store, HERE, spec["uuid"]).record["error"]
    assert error.startswith("refused: the claim is split between this host (VCPU:1) and")
    assert placement.get_allocations(spec["uuid"])["allocations"] == split  # not ours to free


@pytest.mark.parametrize("held", [
    {"VCPU": 1},  # less than asked
    {"VCPU": 2, "MEMORY_MB": 64, "DISK_GB": 1},  # covers it, and more
    {"VCPU": 1, "MEMORY_MB": 64, "DISK_GB": 1, "CUSTOM_X": 1},  # another class besides
])
def test_a_claim_here_with_other_amounts_ends_in_error_with_the_claim_freed(held):
    store, placement, spec, revision = setup(on(HERE, **held))
    assert check_unrecorded(store, placement, spec, revision) == REFUSED
    error = records.read_record(store, HERE, spec["uuid"]).record["error"]
    assert error == (f"refused: the spec asks for DISK_GB:1,MEMORY_MB:64,VCPU:1 but Placement "
                     f"holds {claims.describe(held)} for it here")
    assert placement.get_allocations(spec["uuid"])["allocations"] == {}


# --- the check beside the image fetch -------------------------------------------------------


def futures():
    return concurrent.futures.Future(), concurrent.futures.Future()


def held() -> claims.Holding:
    return claims.judge(on(HERE, VCPU=1), HERE, {"VCPU": 1})


def test_a_held_claim_waits_for_the_image_fetch():
    check, fetch = futures()
    done = verified(check, fetch)
    check.set_result(held())
    assert not done.done()
    fetch.set_exception(OSError("no such image"))  # only cache: the build reports it
    assert done.result().held


def test_the_image_fetch_alone_settles_nothing():
    check, fetch = futures()
    done = verified(check, fetch)
    fetch.set_result(None)
    assert not done.done()
    check.set_result(held())
    assert done.result().held


def test_a_claim_not_held_ends_it_at_once_and_cancels_the_fetch():
    check, fetch = futures()
    done = verified(check, fetch)
    check.set_result(claims.judge({}, HERE, {"VCPU": 1}))
    assert done.result().verdict == claims.MISSING and fetch.cancelled()


def test_a_check_that_failed_fails_it_and_cancels_the_fetch():
    check, fetch = futures()
    done = verified(check, fetch)
    check.set_exception(PlacementUnavailable("Placement is unreachable"))
    assert isinstance(done.exception(), PlacementUnavailable) and fetch.cancelled()


def test_cancelling_it_cancels_both():
    check, fetch = futures()
    assert verified(check, fetch).cancel()
    assert check.cancelled() and fetch.cancelled()


def test_claim_checks_judge_the_spec_for_its_host_on_the_runner():
    placement, pool = FakePlacement(), FakePool()
    spec = make_spec(HERE)
    placement.ensure_provider(HERE, "here")
    placement.set_inventory(HERE, {"VCPU": {"total": 4}, "MEMORY_MB": {"total": 1024},
                                   "DISK_GB": {"total": 10}})
    placement.claim(spec["uuid"], spec["allocations"], "p", "u")
    future = ClaimChecks(placement, pool).start(spec, spec["resources"], timeout=5)
    assert not future.done()  # on the runner, not here
    pool.run_next()
    assert future.result().held

"""The hosts as they account for themselves (scheduler/hostview.py): which queries the view
answers, one read of every live host's account, free capacity as Placement counts it (with
our own claims the accounts do not show yet), and a claim refused sent to the alternates."""

from __future__ import annotations

import random
import time
import uuid as uuidlib
from typing import Any

import pytest

from etcd_compute import hosts, messages
from etcd_compute.errors import ConflictError
from etcd_compute.placement import DISABLED_TRAIT
from etcd_compute.scheduler import hostview
from etcd_compute.scheduler.hoststate import HostState, ProviderUsage
from etcd_compute.scheduler.planner import Pick
from etcd_compute.scheduler.request import parse_query
from etcd_compute.scheduler.spec import Destination
from tests.unit.fakes import FakeStore

ONE = {"VCPU": 1, "MEMORY_MB": 256, "DISK_GB": 1}


def inventory(vcpu: int = 4, ratio: float = 1.0, reserved: int = 0,
              max_unit: int | None = None, step: int = 1) -> dict[str, Any]:
    return {rc: {"total": total, "reserved": reserved if rc == "VCPU" else 0,
                 "allocation_ratio": ratio if rc == "VCPU" else 1.0, "min_unit": 1,
                 "max_unit": (max_unit or total) if rc == "VCPU" else total,
                 "step_size": step if rc == "VCPU" else 1}
            for rc, total in (("VCPU", vcpu), ("MEMORY_MB", 1024 * vcpu),
                              ("DISK_GB", 10 * vcpu))}


def add_host(store: FakeStore, name: str, alive: bool = True, account: bool = True,
             used: dict[str, int] | None = None, as_of: int = 0, **inv: Any) -> str:
    rp = str(uuidlib.uuid4())
    if alive:
        store.put(messages.ALIVE, store.keys.alive(rp),
                  {"host": rp, "name": name, "since": time.time()})
    if account:
        hosts.put_stats(store, rp, {"capacity": {
            "inventory": inventory(**inv), "used": used or {}, "instances": 0,
            "traits": ["HW_ARCH_X86_64"], "as_of": as_of}})
    return rp


@pytest.mark.parametrize("query", [
    "resources=VCPU:1,MEMORY_MB:256",
    "resources=VCPU:1&limit=5",
])
def test_a_query_of_resources_alone_is_answered_by_the_view(query):
    assert hostview.plain_resources(parse_query(query)) is not None


@pytest.mark.parametrize("query", [
    "resources=VCPU:1&required=HW_CPU_X86_AVX2",
    "resources=VCPU:1&required=!CUSTOM_SLOW",
    "resources=VCPU:1&member_of=a287bc0a-0d55-46e4-9af2-f43dcdbb9bc8",
    "resources=VCPU:1&in_tree=8cd7e945-5bfc-4aa0-80da-64b43a38ee45",
    "resources1=VCPU:1&resources2=MEMORY_MB:64&group_policy=isolate",
    "resources=VCPU:1&resources1=MEMORY_MB:64",
])
def test_traits_aggregates_trees_and_granular_groups_are_placements_to_match(query):
    assert hostview.plain_resources(parse_query(query)) is None


def test_one_read_gives_every_live_hosts_account_and_names_those_lacking_one():
    store = FakeStore("/t")
    up = add_host(store, "up")
    old = add_host(store, "old", account=False)
    dead = add_host(store, "dead", alive=False)
    store.put(messages.HOST_MAINTENANCE, store.keys.maintenance(up),
              {"since": time.time(), "reason": None, "by": "ann", "draining": False})
    reads = []
    read_many = store.read_many
    store.read_many = lambda ranges: reads.append(ranges) or read_many(ranges)
    view = hostview.HostView.read(store)
    assert len(reads) == 1
    assert set(view.accounts) == {up} and view.lacking == {old}
    assert dead not in view.accounts and not view.usable
    assert view.disabled == {up} and view.cluster.alive[up] == "up"


def test_a_view_with_no_host_at_all_is_not_usable():
    assert not hostview.HostView.read(FakeStore("/t")).usable


def test_free_capacity_is_counted_as_placement_counts_it_and_own_claims_taken_off():
    store = FakeStore("/t")
    roomy = add_host(store, "roomy", vcpu=2, ratio=4.0, reserved=1)  # (2-1)*4 = 4 VCPU
    full = add_host(store, "full", used={"VCPU": 4, "MEMORY_MB": 1024, "DISK_GB": 40})
    view = hostview.HostView.read(store)
    assert view.usable
    (host,) = view.host_states(ONE, 10, random.Random(1))
    assert host.uuid == roomy and host.options == [{roomy: {"resources": ONE}}]
    assert host.free["VCPU"] == 4 and host.name == "roomy" and host.alive
    assert host.traits == {"HW_ARCH_X86_64"}
    # Three claims of ours not in the account yet: one VCPU left.
    own = [(roomy, ONE)] * 3
    (host,) = view.host_states(ONE, 10, random.Random(1), own)
    assert host.free["VCPU"] == 1 and host.instances == 3
    assert view.host_states(ONE, 10, random.Random(1), own + [(roomy, ONE)]) == []
    assert full not in {h.uuid for h in view.host_states(ONE, 10, random.Random(1))}


def test_amounts_the_inventorys_units_refuse_are_offered_nowhere():
    store = FakeStore("/t")
    add_host(store, "small-units", max_unit=1)
    stepped = add_host(store, "steps-of-2", step=2)
    view = hostview.HostView.read(store)
    two = {"VCPU": 2, "MEMORY_MB": 256, "DISK_GB": 1}
    assert [h.uuid for h in view.host_states(two, 10, random.Random(1))] == [stepped]
    assert view.host_states({**ONE, "VGPU": 1}, 10, random.Random(1)) == []


def test_at_most_limit_hosts_are_offered_at_random_and_a_disabled_one_says_so():
    store = FakeStore("/t")
    rps = [add_host(store, f"h{i}") for i in range(20)]
    store.put(messages.HOST_MAINTENANCE, store.keys.maintenance(rps[0]),
              {"since": time.time(), "reason": None, "by": "ann", "draining": False})
    view = hostview.HostView.read(store)
    offered = [{h.uuid for h in view.host_states(ONE, 5, random.Random(seed))}
               for seed in range(5)]
    assert all(len(o) == 5 for o in offered) and len(set.union(*offered)) > 5
    (disabled,) = [h for h in view.host_states(ONE, 20, random.Random(1))
                   if h.uuid == rps[0]]
    assert DISABLED_TRAIT in disabled.traits and disabled.disabled


def test_own_claims_are_forgotten_once_the_account_shows_them_or_after_a_while(monkeypatch):
    a, b = str(uuidlib.uuid4()), str(uuidlib.uuid4())
    own = hostview.OwnClaims()
    own.add(50, [(a, {a: {"resources": ONE}}), (b, {b: {"resources": ONE}})])
    assert own.unseen({a: 49, b: 10}) == [(a, ONE), (b, ONE)]
    assert own.unseen({a: 50, b: 10}) == [(b, ONE)]  # a's account is as of the write
    later = time.monotonic() + hostview.OWN_CLAIMS_SECONDS + 1
    monkeypatch.setattr(hostview.time, "monotonic", lambda: later)
    assert own.unseen({}) == []


# --- a claim refused -------------------------------------------------------------------------


def picked(count: int = 1, alternates: int = 2) -> tuple[list[Destination], list[Pick]]:
    usage = ProviderUsage({})
    hosts_ = [HostState(str(uuidlib.uuid4()), f"h{i}", usage) for i in range(alternates + 1)]
    options = [{h.uuid: {"resources": ONE}} for h in hosts_]
    picks = [Pick(hosts_[0], options[0], list(zip(hosts_[1:], options[1:], strict=True)))
             for _ in range(count)]
    destinations = [Destination(str(uuidlib.uuid4()), "vm", hosts_[0].uuid, "h0", options[0],
                                [{"host": h.uuid, "allocations": o}
                                 for h, o in zip(hosts_[1:], options[1:], strict=True)])
                    for _ in range(count)]
    return destinations, picks


def refusing(*hosts_refusing: str):
    tried: list[str] = []

    def claim(destinations: list[Destination]) -> None:
        tried.append(",".join(d.host_name for d in destinations))
        if any(d.host_name in hosts_refusing for d in destinations):
            raise ConflictError("no room", 409)

    return claim, tried


def test_a_claim_refused_goes_to_the_next_alternate_with_the_rest_kept():
    destinations, picks = picked()
    claim, tried = refusing("h0")
    (moved,) = hostview.claim_somewhere(claim, destinations, picks)
    assert tried == ["h0", "h1"]
    assert (moved.host_name, moved.host) == ("h1", picks[0].alternates[0][0].uuid)
    assert moved.allocations == picks[0].alternates[0][1]
    assert [a["host"] for a in moved.alternates] == [picks[0].alternates[1][0].uuid]
    assert moved.uuid == destinations[0].uuid


def test_refused_everywhere_or_several_at_once_nothing_is_held():
    destinations, picks = picked()
    claim, tried = refusing("h0", "h1", "h2")
    assert hostview.claim_somewhere(claim, destinations, picks) is None
    assert tried == ["h0", "h1", "h2"]
    destinations, picks = picked(count=2)
    claim, tried = refusing("h0")
    assert hostview.claim_somewhere(claim, destinations, picks) is None
    assert tried == ["h0,h0"]  # all or nothing: Placement's candidates decide


def test_a_host_whose_account_lacks_a_required_trait_is_not_offered():
    store = FakeStore("/t")
    plain = add_host(store, "plain")
    backend = add_host(store, "backend")
    view = hostview.HostView.read(store)
    view.accounts[backend]["traits"].append("CUSTOM_BACKEND")
    offered = {h.uuid for h in view.host_states(ONE, 10, random.Random(1),
                                               required={"CUSTOM_BACKEND"})}
    assert offered == {backend}
    assert {h.uuid for h in view.host_states(ONE, 10, random.Random(1))} == {plain, backend}

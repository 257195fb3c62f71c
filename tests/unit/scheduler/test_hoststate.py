"""Host states: free capacity and its virtual depletion, provider trees and sharing providers,
host states from an allocation-candidates answer, etcd's view of the hosts (FakeStore)."""

from __future__ import annotations

import time
import uuid as uuidlib
from collections import Counter

import pytest

from etcd_compute import messages
from etcd_compute.etcd import Entry
from etcd_compute.scheduler.hoststate import (
    BUILD_FAILURE_WINDOW_SECONDS,
    SHARING_TRAIT,
    Cluster,
    HostState,
    LiveHosts,
    ProviderUsage,
    _host_of,
    candidate_providers,
    host_states,
    instance_counts,
)
from tests.unit.fakes import FakeStore

A, A_GPU, B, SHARED = (str(uuidlib.UUID(int=n)) for n in (0xA, 0xA6, 0xB, 0x5))
NOW = 1_700_000_000.0


def summary(resources: dict[str, tuple[int, int]], root: str, traits=()) -> dict:
    """A provider summary: {rc: (capacity, used)}."""
    return {"resources": {rc: {"capacity": c, "used": u} for rc, (c, u) in resources.items()},
            "traits": list(traits), "root_provider_uuid": root}


def alloc(**by_rp: dict[str, int]) -> dict:
    return {rp: {"resources": resources} for rp, resources in by_rp.items()}


# ------------------------------------------------------------------ ProviderUsage


def test_usage_free_is_capacity_minus_used():
    usage = ProviderUsage({A: summary({"VCPU": (8, 3), "MEMORY_MB": (1024, 1024)}, A)})
    assert usage.free == {A: {"VCPU": 5, "MEMORY_MB": 0}}


def test_fits_only_when_every_class_on_every_provider_has_room():
    usage = ProviderUsage({A: summary({"VCPU": (4, 2), "DISK_GB": (10, 0)}, A)})
    assert usage.fits({A: {"resources": {"VCPU": 2, "DISK_GB": 10}}})
    assert not usage.fits({A: {"resources": {"VCPU": 3}}})
    assert not usage.fits({A: {"resources": {"VGPU": 1}}})  # no inventory of the class
    assert not usage.fits({B: {"resources": {"VCPU": 1}}})  # provider never seen


def test_consume_depletes_what_fits_next():
    usage = ProviderUsage({A: summary({"VCPU": (4, 1)}, A)})
    usage.consume({A: {"resources": {"VCPU": 2}}})
    assert usage.free[A]["VCPU"] == 1
    assert usage.fits({A: {"resources": {"VCPU": 1}}})
    assert not usage.fits({A: {"resources": {"VCPU": 2}}})


def test_a_sharing_provider_is_depleted_for_every_host_using_it():
    usage = ProviderUsage({A: summary({"VCPU": (4, 0)}, A), B: summary({"VCPU": (4, 0)}, B),
                           SHARED: summary({"DISK_GB": (10, 0)}, SHARED, [SHARING_TRAIT])})
    on_a = HostState(A, "a", usage, options=[alloc(**{A: {"VCPU": 1}, SHARED: {"DISK_GB": 6}})])
    on_b = HostState(B, "b", usage, options=[alloc(**{B: {"VCPU": 1}, SHARED: {"DISK_GB": 6}})])
    assert on_b.fitting_option() is not None
    usage.consume(on_a.fitting_option())
    assert on_b.fitting_option() is None


# ---------------------------------------------------------------------- HostState


def test_free_sums_the_host_provider_tree():
    usage = ProviderUsage({A: summary({"VCPU": (8, 2), "MEMORY_MB": (4096, 0)}, A),
                           A_GPU: summary({"VGPU": (4, 1)}, A),
                           B: summary({"VCPU": (100, 0)}, B)})
    host = HostState(A, "a", usage, tree={A, A_GPU})
    assert host.free == {"VCPU": 6, "MEMORY_MB": 4096, "VGPU": 3}
    # Without a known tree: the root provider alone.
    assert HostState(A, "a", usage).free == {"VCPU": 6, "MEMORY_MB": 4096}


def test_fitting_option_is_the_first_offered_allocation_that_still_fits():
    usage = ProviderUsage({A: summary({"VCPU": (2, 0)}, A), A_GPU: summary({"VGPU": (1, 0)}, A)})
    with_gpu = alloc(**{A: {"VCPU": 1}, A_GPU: {"VGPU": 1}})
    without = alloc(**{A: {"VCPU": 1}})
    host = HostState(A, "a", usage, options=[with_gpu, without])
    assert host.fitting_option() == with_gpu
    usage.consume(with_gpu)
    assert host.fitting_option() == without
    usage.consume(without)
    assert host.fitting_option() is None


def test_disabled_means_the_disabled_trait():
    usage = ProviderUsage({})
    assert HostState(A, "a", usage, traits={"COMPUTE_STATUS_DISABLED"}).disabled
    assert not HostState(A, "a", usage, traits={"HW_CPU_X86_AVX2"}).disabled


def test_recent_failures_count_only_inside_the_window():
    host = HostState(A, "a", ProviderUsage({}), build_failures=[
        NOW - 1, NOW - BUILD_FAILURE_WINDOW_SECONDS + 1, NOW - BUILD_FAILURE_WINDOW_SECONDS])
    assert host.recent_failures(NOW) == 2
    assert host.recent_failures(NOW + BUILD_FAILURE_WINDOW_SECONDS) == 0
    fresh = HostState(A, "a", ProviderUsage({}), build_failures=[time.time()])
    assert fresh.recent_failures() == 1  # default: now


# ---------------------------------------------------- from an allocation-candidates answer


def test_host_of_skips_sharing_providers_and_goes_to_the_root():
    summaries = {A: summary({"VCPU": (4, 0)}, A), A_GPU: summary({"VGPU": (1, 0)}, A),
                 SHARED: summary({"DISK_GB": (10, 0)}, SHARED, [SHARING_TRAIT])}
    # The sharing provider listed first does not make it the host.
    assert _host_of(alloc(**{SHARED: {"DISK_GB": 1}, A: {"VCPU": 1}}), summaries) == A
    assert _host_of(alloc(**{A_GPU: {"VGPU": 1}}), summaries) == A
    assert _host_of(alloc(**{SHARED: {"DISK_GB": 1}, A_GPU: {"VGPU": 1}}), summaries) == A


CANDIDATES = {
    "allocation_requests": [
        {"allocations": alloc(**{B: {"VCPU": 1}})},
        {"allocations": alloc(**{A: {"VCPU": 1}, A_GPU: {"VGPU": 1}})},
        {"allocations": alloc(**{A: {"VCPU": 1}, SHARED: {"DISK_GB": 1}})},
    ],
    "provider_summaries": {
        A: summary({"VCPU": (8, 0)}, A, ["HW_CPU_X86_AVX2"]),
        A_GPU: summary({"VGPU": (2, 0)}, A),
        B: summary({"VCPU": (4, 3)}, B, ["COMPUTE_STATUS_DISABLED"]),
        SHARED: summary({"DISK_GB": (100, 0)}, SHARED, [SHARING_TRAIT]),
    },
}


def test_host_states_group_the_answer_by_host_in_placements_order():
    cluster = Cluster(alive={A: "host-a"}, build_failures={B: [NOW]},
                      instances=Counter({A: 2}))
    b, a = host_states(CANDIDATES, cluster)
    assert (b.uuid, a.uuid) == (B, A)  # Placement's order, not sorted
    assert a.options == [r["allocations"] for r in CANDIDATES["allocation_requests"][1:]]
    assert (a.name, a.alive, a.instances, a.build_failures) == ("host-a", True, 2, [])
    assert (b.name, b.alive, b.instances, b.build_failures) == (B, False, 0, [NOW])
    assert a.traits == {"HW_CPU_X86_AVX2"} and b.disabled
    assert a.tree == {A, A_GPU} and b.tree == {B}
    assert a.free == {"VCPU": 8, "VGPU": 2} and b.free == {"VCPU": 1}
    assert a.usage is b.usage  # one usage: depletion is seen by every host


def test_host_states_of_an_empty_answer():
    assert host_states({"allocation_requests": [], "provider_summaries": {}}, Cluster()) == []


def test_candidate_providers_are_summaries_roots_and_allocated_providers():
    answer = {"allocation_requests": [{"allocations": alloc(**{B: {"VCPU": 1}})}],
              "provider_summaries": {A_GPU: summary({"VGPU": (1, 0)}, A)}}
    assert candidate_providers(answer) == {A_GPU, A, B}
    assert candidate_providers(CANDIDATES) == {A, A_GPU, B, SHARED}
    assert candidate_providers({}) == set()


# -------------------------------------------------------------------- etcd's view


def put_alive(store: FakeStore, rp: str, name: str) -> None:
    store.put(messages.ALIVE, store.keys.alive(rp), {"host": rp, "name": name, "since": NOW})


def cluster_store() -> FakeStore:
    store = FakeStore("/p")
    put_alive(store, A, "host-a")
    put_alive(store, B, "host-b")
    store.put_raw(store.keys.alive(SHARED), "{not json")
    store.put_raw(store.keys.alive(A_GPU), '{"host": "x"}')  # breaks the schema
    store.put(messages.HOST_STATS, store.keys.stats(A), {"build_failures": [NOW - 5],
                                                         "updated_at": NOW})
    store.put_raw(store.keys.stats(B), '{"build_failures": "many"}')
    for _ in range(2):
        store.put_raw(store.keys.spec(A, str(uuidlib.uuid4())), "{}")
    store.put_raw(store.keys.spec(B, str(uuidlib.uuid4())), "{}")
    return store


def test_cluster_read_skips_invalid_messages():
    cluster = Cluster.read(cluster_store())
    assert cluster.alive == {A: "host-a", B: "host-b"}
    assert cluster.build_failures == {A: [NOW - 5]}
    assert cluster.instances == {A: 2, B: 1}


def test_cluster_read_only_some_hosts():
    cluster = Cluster.read(cluster_store(), only={B})
    assert cluster.alive == {B: "host-b"}
    assert cluster.build_failures == {}
    # Instance counts come from the spec keys, of the hosts asked about only.
    assert cluster.instances == {B: 1}


def test_instance_counts_are_counted_by_etcd_in_chunks_of_max_txn_ops():
    store = cluster_store()
    reads = []
    real = store.read_many
    store.read_many = lambda ranges: reads.append(len(ranges)) or real(ranges)
    assert instance_counts(store, [A, B, SHARED], max_ops=2) == {A: 2, B: 1}
    assert reads == [2, 1]


def test_live_hosts_counts_the_live_hosts_not_excluded_in_the_shards_asked_about():
    from etcd_compute.shards import aggregate_of

    store = cluster_store()
    live = LiveHosts.read(store)
    assert live.alive == 4  # every heartbeat key: whether to shard needs no validation
    assert live.counted == {A, B, SHARED, A_GPU}
    assert live.counts == {A: 2, B: 1}
    assert LiveHosts.read(store, exclude=[A]).counts == {B: 1}
    # A and B share a shard (15), SHARED (5) and A_GPU (8) do not.
    shard = LiveHosts.read(store, aggregates=[aggregate_of(A), aggregate_of(SHARED)])
    assert shard.counted == {A, B, SHARED}
    assert shard.counts == {A: 2, B: 1}


@pytest.fixture
def decoded(monkeypatch) -> list[str]:
    """Every message the code under test decodes, by schema."""
    seen: list[str] = []
    real = messages.decode

    def counting(schema, raw):
        seen.append(schema)
        return real(schema, raw)

    monkeypatch.setattr(messages, "decode", counting)
    return seen


def test_decode_cache_validates_each_key_revision_once(decoded):
    store = FakeStore("/p")
    put_alive(store, A, "host-a")
    put_alive(store, B, "host-b")
    cache: dict = {}
    assert Cluster.read(store, cache=cache).alive == {A: "host-a", B: "host-b"}
    assert decoded.count(messages.ALIVE) == 2
    assert set(cache[store.keys.alive_prefix()]) == {
        (store.keys.alive(rp), store.get(store.keys.alive(rp)).mod_revision) for rp in (A, B)}
    decoded.clear()
    assert Cluster.read(store, cache=cache).alive == {A: "host-a", B: "host-b"}
    assert decoded.count(messages.ALIVE) == 0
    put_alive(store, B, "host-b2")  # a new mod_revision: decoded again
    assert Cluster.read(store, cache=cache).alive == {A: "host-a", B: "host-b2"}
    assert decoded.count(messages.ALIVE) == 1


def test_decode_cache_is_keyed_by_mod_revision_not_by_value():
    store = FakeStore("/p")
    put_alive(store, A, "host-a")
    cache: dict = {}
    Cluster.read(store, cache=cache)
    key = store.keys.alive(A)
    old = store.get(key)
    # Same key and mod_revision, other bytes: the cached message stands (etcd never does this,
    # which is why the cache may trust the revision).
    store.entries[key] = Entry(key, b"{garbage", old.mod_revision, old.create_revision)
    assert Cluster.read(store, cache=cache).alive == {A: "host-a"}
    # A real write of garbage has a new revision: decoded, invalid, skipped.
    store.put_raw(key, "{garbage")
    assert Cluster.read(store, cache=cache).alive == {}


def test_decode_cache_forgets_keys_that_are_gone():
    store = FakeStore("/p")
    put_alive(store, A, "host-a")
    put_alive(store, B, "host-b")
    cache: dict = {}
    Cluster.read(store, cache=cache)
    store.delete(store.keys.alive(B))
    assert Cluster.read(store, cache=cache).alive == {A: "host-a"}
    assert [k for k, _ in cache[store.keys.alive_prefix()]] == [store.keys.alive(A)]


def test_decode_cache_with_only_skips_other_hosts_and_keeps_their_earlier_messages(decoded):
    store = FakeStore("/p")
    put_alive(store, A, "host-a")
    put_alive(store, B, "host-b")
    cache: dict = {}
    Cluster.read(store, only={A}, cache=cache)
    assert decoded.count(messages.ALIVE) == 1  # B's heartbeat left undecoded
    Cluster.read(store, only={B}, cache=cache)
    decoded.clear()
    # Both are cached now, from two requests with different candidates.
    assert Cluster.read(store, only={A, B}, cache=cache).alive == {A: "host-a", B: "host-b"}
    assert decoded.count(messages.ALIVE) == 0

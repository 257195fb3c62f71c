"""Each weigher's raw value, normalization, and the sign of the multiplier: spread or pack."""

from __future__ import annotations

from collections import Counter

import pytest

from etcd_compute.errors import ConfigError
from etcd_compute.scheduler.context import PlanContext
from etcd_compute.scheduler.hoststate import (
    BUILD_FAILURE_WINDOW_SECONDS,
    HostState,
    ProviderUsage,
)
from etcd_compute.scheduler.weighers import (
    BuildFailureWeigher,
    CPUWeigher,
    DiskWeigher,
    RAMWeigher,
    SoftAffinityWeigher,
    enabled_weighers,
    normalize,
    weigh,
)

NOW = 1_700_000_000.0


def hosts(free: dict[str, dict[str, int]], **attrs) -> list[HostState]:
    """Host states with the given free amounts ({host: {rc: free}}), sharing one usage."""
    usage = ProviderUsage({
        uuid: {"resources": {rc: {"capacity": amount, "used": 0} for rc, amount in rcs.items()}}
        for uuid, rcs in free.items()})
    return [HostState(uuid=uuid, name=uuid, usage=usage, tree={uuid}, alive=True, **attrs)
            for uuid in free]


def names(weighed: list[tuple[float, HostState]]) -> list[str]:
    return [h.uuid for _, h in weighed]


def test_free_resource_weighers_read_the_host_free_amounts():
    (host,) = hosts({"h": {"VCPU": 3, "MEMORY_MB": 512, "DISK_GB": 7}})
    assert RAMWeigher().raw_weight(host, PlanContext()) == 512
    assert CPUWeigher().raw_weight(host, PlanContext()) == 3
    assert DiskWeigher().raw_weight(host, PlanContext()) == 7
    (bare,) = hosts({"h": {}})
    assert [w.raw_weight(bare, PlanContext()) for w in (RAMWeigher(), CPUWeigher(),
                                                        DiskWeigher())] == [0, 0, 0]


def test_build_failure_weigher_counts_only_recent_failures_negatively():
    (host,) = hosts({"h": {"VCPU": 1}},
                    build_failures=[NOW - 10, NOW - 100, NOW - BUILD_FAILURE_WINDOW_SECONDS - 1])
    assert BuildFailureWeigher().raw_weight(host, PlanContext(now=NOW)) == -2
    (clean,) = hosts({"h": {"VCPU": 1}})
    assert BuildFailureWeigher().raw_weight(clean, PlanContext(now=NOW)) == 0


def test_soft_affinity_weigher_prefers_or_avoids_members_by_policy():
    (host,) = hosts({"h": {"VCPU": 1}})
    members = Counter({"h": 2})
    weigher = SoftAffinityWeigher()
    assert weigher.raw_weight(host, PlanContext("affinity", members)) == 2
    assert weigher.raw_weight(host, PlanContext("anti-affinity", members)) == -2
    assert weigher.raw_weight(host, PlanContext("soft-affinity", members)) == 2
    assert weigher.raw_weight(host, PlanContext("soft-anti-affinity", members)) == -2
    assert weigher.raw_weight(host, PlanContext(None, members)) == 0


def test_normalize_maps_to_0_1_and_equal_values_to_0():
    assert normalize([2.0, 4.0, 6.0]) == [0.0, 0.5, 1.0]
    assert normalize([-3.0, 0.0]) == [0.0, 1.0]
    assert normalize([5.0, 5.0, 5.0]) == [0.0, 0.0, 0.0]
    assert normalize([1.0]) == [0.0]


FREE = {"full": {"VCPU": 1, "MEMORY_MB": 256},
        "half": {"VCPU": 4, "MEMORY_MB": 1024},
        "empty": {"VCPU": 8, "MEMORY_MB": 4096}}


def test_positive_multipliers_spread_most_free_first():
    weighed = weigh(hosts(FREE), [(RAMWeigher(), 1.0), (CPUWeigher(), 1.0)], PlanContext())
    assert names(weighed) == ["empty", "half", "full"]
    assert [w for w, _ in weighed][0] == pytest.approx(2.0)


def test_negative_multipliers_pack_fullest_first():
    weighed = weigh(hosts(FREE), [(RAMWeigher(), -1.0), (CPUWeigher(), -1.0)], PlanContext())
    assert names(weighed) == ["full", "half", "empty"]
    assert [w for w, _ in weighed][-1] == pytest.approx(-2.0)


def test_multiplier_scales_a_weigher_against_the_others():
    # RAM says "a", CPU says "b"; the larger multiplier decides.
    free = {"a": {"VCPU": 1, "MEMORY_MB": 4096}, "b": {"VCPU": 8, "MEMORY_MB": 256}}
    assert names(weigh(hosts(free), [(RAMWeigher(), 2.0), (CPUWeigher(), 1.0)],
                       PlanContext()))[0] == "a"
    assert names(weigh(hosts(free), [(RAMWeigher(), 1.0), (CPUWeigher(), 2.0)],
                       PlanContext()))[0] == "b"


def test_build_failures_outweigh_free_capacity():
    failing, *others = hosts({"failing": {"VCPU": 16, "MEMORY_MB": 8192}, **FREE})
    failing.build_failures = [NOW - 5]
    weighed = weigh([failing, *others], [(RAMWeigher(), 1.0), (CPUWeigher(), 1.0),
                                         (BuildFailureWeigher(), 10.0)], PlanContext(now=NOW))
    assert names(weighed) == ["empty", "half", "full", "failing"]


def test_ties_keep_the_given_order():
    same = {f"h{i}": {"VCPU": 2} for i in range(5)}
    given = hosts(same)[::-1]
    assert names(weigh(given, [(CPUWeigher(), 1.0)], PlanContext())) == [h.uuid for h in given]
    assert names(weigh(given, [], PlanContext())) == [h.uuid for h in given]


def test_enabled_weighers_drop_zero_multipliers_and_keep_order():
    enabled = enabled_weighers({"CPUWeigher": 2, "DiskWeigher": 0.0, "RAMWeigher": -1.5})
    assert [(type(w), m) for w, m in enabled] == [(CPUWeigher, 2.0), (RAMWeigher, -1.5)]
    assert all(isinstance(m, float) for _, m in enabled)


def test_unknown_weigher_is_a_config_error_even_with_zero_multiplier():
    with pytest.raises(ConfigError) as caught:
        enabled_weighers({"RAMWeigher": 1.0, "IoOpsWeigher": 0.0})
    message = str(caught.value)
    assert message.startswith("scheduler.weighers: unknown weigher 'IoOpsWeigher'; known: ")
    assert "BuildFailureWeigher, CPUWeigher, DiskWeigher, RAMWeigher, SoftAffinityWeigher" \
        in message

"""Each host filter on hand-made host states; filters enabled by name, in order."""

from __future__ import annotations

from collections import Counter

import pytest

from etcd_compute.errors import ConfigError
from etcd_compute.scheduler.context import PlanContext
from etcd_compute.scheduler.filters import (
    AffinityFilter,
    AliveFilter,
    AntiAffinityFilter,
    DisabledFilter,
    ImagePropertiesFilter,
    MaxInstancesPerHostFilter,
    enabled_filters,
)
from etcd_compute.scheduler.hoststate import HostState, ProviderUsage


def host(uuid: str = "h1", **attrs) -> HostState:
    """A host state as Nova's FakeHostState: only what the filter looks at."""
    return HostState(uuid=uuid, name=uuid, usage=ProviderUsage({}), **attrs)


def test_alive_filter_needs_a_heartbeat():
    assert AliveFilter().host_passes(host(alive=True), PlanContext())
    assert not AliveFilter().host_passes(host(alive=False), PlanContext())


def test_disabled_filter_removes_hosts_with_the_disabled_trait():
    assert DisabledFilter().host_passes(host(traits={"HW_CPU_X86_AVX2"}), PlanContext())
    assert not DisabledFilter().host_passes(host(traits={"COMPUTE_STATUS_DISABLED"}),
                                            PlanContext())


def test_affinity_filter_keeps_only_hosts_with_members_once_the_group_has_any():
    members = PlanContext(policy="affinity", group_hosts=Counter({"h1": 2}))
    assert AffinityFilter().host_passes(host("h1"), members)
    assert not AffinityFilter().host_passes(host("h2"), members)
    # An empty group: the first member may go anywhere.
    assert AffinityFilter().host_passes(host("h2"), PlanContext(policy="affinity"))


def test_affinity_filter_ignores_other_policies():
    other = PlanContext(policy="anti-affinity", group_hosts=Counter({"h1": 1}))
    assert AffinityFilter().host_passes(host("h2"), other)
    assert AffinityFilter().host_passes(host("h2"), PlanContext(group_hosts=Counter({"h1": 1})))


def test_anti_affinity_filter_removes_hosts_with_a_member():
    context = PlanContext(policy="anti-affinity", group_hosts=Counter({"h1": 1}))
    assert not AntiAffinityFilter().host_passes(host("h1"), context)
    assert AntiAffinityFilter().host_passes(host("h2"), context)


def test_anti_affinity_filter_ignores_other_policies():
    context = PlanContext(policy="affinity", group_hosts=Counter({"h1": 1}))
    assert AntiAffinityFilter().host_passes(host("h1"), context)
    assert AntiAffinityFilter().host_passes(host("h1"), PlanContext())
    for soft in ("soft-affinity", "soft-anti-affinity"):  # weighed, never filtered
        context = PlanContext(policy=soft, group_hosts=Counter({"h1": 3}))
        assert AntiAffinityFilter().host_passes(host("h1"), context)
        assert AffinityFilter().host_passes(host("h2"), context)


def test_anti_affinity_allows_max_server_per_host_members():
    context = PlanContext(policy="anti-affinity", group_hosts=Counter({"h1": 1, "h2": 2}),
                          group_max=2)
    assert AntiAffinityFilter().host_passes(host("h1"), context)
    assert not AntiAffinityFilter().host_passes(host("h2"), context)


def test_max_instances_per_host_is_a_strict_limit():
    context = PlanContext(max_instances_per_host=2)
    assert MaxInstancesPerHostFilter().host_passes(host(instances=1), context)
    assert not MaxInstancesPerHostFilter().host_passes(host(instances=2), context)
    assert not MaxInstancesPerHostFilter().host_passes(host(instances=3), context)


QEMU_X86 = {"HW_ARCH_X86_64", "CUSTOM_HYPERVISOR_QEMU"}


@pytest.mark.parametrize(("properties", "traits", "passes"), [
    ({}, set(), True),  # an image that names nothing goes anywhere
    ({"architecture": "x86_64"}, QEMU_X86, True),
    ({"architecture": "aarch64"}, QEMU_X86, False),
    ({"hypervisor_type": "qemu"}, QEMU_X86, True),
    ({"hypervisor_type": "kvm"}, QEMU_X86, False),
    ({"hypervisor_type": "kvm"}, QEMU_X86 | {"CUSTOM_HYPERVISOR_KVM"}, True),
    ({"architecture": "x86_64", "hypervisor_type": "qemu"}, {"CUSTOM_HYPERVISOR_FAKE"}, False),
    ({"architecture": "x86_64"}, set(), False),  # a host that says nothing: not known to fit
])
def test_image_properties_filter_compares_architecture_and_hypervisor_with_host_traits(
        properties, traits, passes):
    context = PlanContext(image_properties=properties)
    assert ImagePropertiesFilter().host_passes(host(traits=traits), context) is passes


def test_every_filter_has_a_reason_for_the_explanation():
    for cls in (AliveFilter, DisabledFilter, AffinityFilter, AntiAffinityFilter,
                MaxInstancesPerHostFilter, ImagePropertiesFilter):
        assert cls.reason and "\n" not in cls.reason


def test_enabled_filters_are_instances_in_config_order():
    filters = enabled_filters(["MaxInstancesPerHostFilter", "AliveFilter"])
    assert [type(f) for f in filters] == [MaxInstancesPerHostFilter, AliveFilter]
    assert enabled_filters([]) == []


def test_unknown_filter_name_is_a_config_error_listing_the_known_ones():
    with pytest.raises(ConfigError) as caught:
        enabled_filters(["AliveFilter", "RamFilter", "NopeFilter"])
    message = str(caught.value)
    assert message.startswith("scheduler.filters: unknown filter 'RamFilter'; known: ")
    assert "AffinityFilter, AliveFilter, AntiAffinityFilter, DisabledFilter, " \
           "ImagePropertiesFilter, MaxInstancesPerHostFilter" in message

"""Host filters: each a tiny class with one method, enabled by name in schedule.yaml.

A filter answers "can this host take one more instance of this request?".
Resource fit is Placement's job (and the planner's virtual depletion); these
cover what Placement does not know. To add one: write a class here with
`host_passes` and a `reason`, list its name under `scheduler.filters`.
"""

from __future__ import annotations

from etcd_compute.errors import ConfigError
from etcd_compute.scheduler.context import PlanContext
from etcd_compute.scheduler.hoststate import HostState


class HostFilter:
    # Completes "<Name> removed N host(s): <reason>" in the no-valid-host explanation.
    reason = ""

    def host_passes(self, host: HostState, context: PlanContext) -> bool:
        raise NotImplementedError


class AliveFilter(HostFilter):
    reason = "no heartbeat in etcd (/alive/<rp> missing: compute.py not running?)"

    def host_passes(self, host: HostState, context: PlanContext) -> bool:
        return host.alive


class DisabledFilter(HostFilter):
    reason = ("disabled (trait COMPUTE_STATUS_DISABLED: compute.py stopped or host disabled "
              "by an operator)")

    def host_passes(self, host: HostState, context: PlanContext) -> bool:
        return not host.disabled


class AffinityFilter(HostFilter):
    reason = "not where the affinity group's members are"

    def host_passes(self, host: HostState, context: PlanContext) -> bool:
        if context.policy != "affinity" or not context.group_hosts:
            return True
        return context.group_hosts[host.uuid] > 0


class AntiAffinityFilter(HostFilter):
    reason = "already hosts a member of the anti-affinity group"

    def host_passes(self, host: HostState, context: PlanContext) -> bool:
        if context.policy != "anti-affinity":
            return True
        return context.group_hosts[host.uuid] < context.group_max


class MaxInstancesPerHostFilter(HostFilter):
    reason = "already at scheduler.max_instances_per_host"

    def host_passes(self, host: HostState, context: PlanContext) -> bool:
        return host.instances < context.max_instances_per_host


class ImagePropertiesFilter(HostFilter):
    """Nova's ImagePropertiesFilter: a host that supports the image's architecture and
    hypervisor type, as its traits say (HW_ARCH_<ARCH>, CUSTOM_HYPERVISOR_<TYPE>: what the
    compute registers). An image that names neither passes everywhere."""

    reason = ("does not support the image's architecture or hypervisor type (traits "
              "HW_ARCH_*, CUSTOM_HYPERVISOR_*)")

    def host_passes(self, host: HostState, context: PlanContext) -> bool:
        wanted = context.image_properties
        architecture, hypervisor = wanted.get("architecture"), wanted.get("hypervisor_type")
        if architecture and f"HW_ARCH_{architecture.upper()}" not in host.traits:
            return False
        return not hypervisor or f"CUSTOM_HYPERVISOR_{hypervisor.upper()}" in host.traits


def all_filters() -> dict[str, type[HostFilter]]:
    return {cls.__name__: cls for cls in HostFilter.__subclasses__()}


def enabled_filters(names: list[str]) -> list[HostFilter]:
    """Instances of the filters named in config, in that order."""
    known = all_filters()
    unknown = [name for name in names if name not in known]
    if unknown:
        raise ConfigError(f"scheduler.filters: unknown filter {unknown[0]!r}; known: "
                          + ", ".join(sorted(known)))
    return [known[name]() for name in names]

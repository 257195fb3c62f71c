"""The one home of the network backend choice."""

from __future__ import annotations

import pytest

from etcd_compute import network_backend
from etcd_compute.config import COMPUTE_DEFAULTS, SCHEDULE_DEFAULTS
from etcd_compute.errors import UsageError


def test_the_default_is_the_libvirt_network_for_hosts_and_scheduler_alike() -> None:
    assert network_backend.backend_of(COMPUTE_DEFAULTS) == network_backend.LIBVIRT
    assert network_backend.backend_of(SCHEDULE_DEFAULTS) == network_backend.LIBVIRT


def test_each_backend_has_its_own_trait() -> None:
    traits = {network_backend.trait_of(b) for b in network_backend.BACKENDS}
    assert len(traits) == len(network_backend.BACKENDS)
    assert all(trait.startswith("CUSTOM_") for trait in traits)


def test_a_neutron_feature_under_the_libvirt_backend_is_refused_in_one_line() -> None:
    with pytest.raises(UsageError, match="networks by uuid needs network.backend neutron"):
        network_backend.refuse_unless_neutron({"network": {"backend": "libvirt"}},
                                              "networks by uuid")
    network_backend.refuse_unless_neutron({"network": {"backend": "neutron"}}, "ports")

"""Compute hosts from Placement, heartbeats and disables; zones from aggregates; ids."""

from __future__ import annotations

from etcd_compute.api.objects.computes import Computes
from tests.unit.api.harness import Harness

AGGREGATE = "0b5d6c43-43f6-4c1e-9f8b-6c5a8a6f2a11"


def test_a_host_is_its_provider_heartbeat_and_disable():
    harness = Harness.new()
    up = harness.add_host("hv1", vcpus=4)
    down = harness.add_host("hv2", alive=False)
    harness.placement.set_aggregates(down, [AGGREGATE])
    computes = Computes(harness.store, harness.placement,
                        {"default_availability_zone": "nova",
                         "availability_zones": {"rack2": AGGREGATE}},
                        harness.backend.aggregates)
    one, two = computes.list()
    assert (one.uuid, one.alive, one.zone, one.total("VCPU"), one.free("VCPU")) == (
        up, True, "nova", 4, 4)
    assert (two.uuid, two.alive, two.zone) == (down, False, "rack2")
    assert one.legacy_id == int(up.replace("-", "")[:7], 16)
    assert computes.find(str(one.legacy_id)).uuid == up
    computes.disable(one, "why", "api:root@admin")
    assert computes.find(up).disabled and computes.find(up).reason == "why"
    computes.enable(one)
    assert not computes.find(up).disabled
    computes.delete(two)
    assert [c.uuid for c in computes.list()] == [up]

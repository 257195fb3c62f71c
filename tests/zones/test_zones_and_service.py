"""A zone whose scheduler service runs (`schedule.py serve`) still federates: a request for
a zone below, or any request at a zone with children, is planned across the zones by
schedule.py itself (the service places only this zone's own hosts); `--zone <this zone's
name>` goes through the service."""

from __future__ import annotations

from etcd_compute.config import deep_merge
from tests.support import wait_for
from tests.zones.test_federation import QUERY, notified, placed_by_zone


def test_requests_for_zones_below_bypass_the_service_this_zone_alone_uses_it(
        zones, start_controller):
    zones["parent"].add_host("h0", vcpu=2)  # room for two of QUERY
    zones["a"].add_host("h0")
    store = zones.parent.store
    controller = start_controller(deep_merge(zones.parent.config, {
        "logging": {"level": "INFO"}, "scheduler": {"controller_lease_ttl": 2}}))
    wait_for(lambda: store.get(store.keys.queue_open()), 30, what="the queue to open")

    # For zone a: placed there (the service would have used the parent's host).
    run = zones.run(QUERY, "--zone", "a")
    assert run.code == 0, run.stdout + run.stderr
    assert [zone for _, _, zone in notified(run.stdout)] == ["a"]
    assert placed_by_zone(zones) == {"a": 1}

    # This zone alone: through the service (its pass answers it).
    run = zones.run(QUERY, "--zone", "hq")
    assert run.code == 0, run.stdout + run.stderr
    assert [zone for _, _, zone in notified(run.stdout)] == [""]
    assert placed_by_zone(zones) == {"a": 1, "hq": 1}
    wait_for(lambda: "1 answered" in controller.log(), 10, what="the service's pass")

    # At the parent, no --zone: three fit only across zones (the parent has room for one).
    run = zones.run(QUERY, "--count", "3")
    assert run.code == 0, run.stdout + run.stderr
    assert "a" in {zone for _, _, zone in notified(run.stdout)}
    assert sum(placed_by_zone(zones).values()) == 5
    assert controller.log().count("pass of") == 1
    assert not zones.parent.keys("/queue/requests/")

"""A zone lost before or during a request: skipped with the reason; mid-request, the request
completes in the other zones or leaves nothing anywhere (b is reached through proxies that
the test cuts at the moment it chooses: right after b's claim, or at b's claim)."""

from __future__ import annotations

import pytest

from etcd_compute.errors import NoValidHost
from etcd_compute.scheduler import RequestSpec, Scheduler
from etcd_compute.zones import journal
from etcd_compute.zones.federation import Federation
from etcd_compute.zones.tree import ZoneTree

QUERY = "resources=VCPU:1,MEMORY_MB:256,DISK_GB:1"


def hosts(zones) -> None:
    """Room for 4 in each of a, b, c, d."""
    for name in ("a", "b", "c", "d"):
        zones[name].add_host("h0")


def nothing_left(zone) -> None:
    assert zone.allocations() == {}, zone.name
    assert zone.specs() == {}, zone.name
    assert zone.keys("/instances/") == [], zone.name


def request(zones, count: int) -> list:
    spec = RequestSpec.build(QUERY, count=count)
    with ZoneTree(zones.parent.config) as tree:
        try:
            return Federation(tree).select_destinations(spec)
        finally:
            tree.root.scheduler.close()


def cut_at_claim(monkeypatch, zones, what: str, after: bool) -> list[str]:
    """Cut b's `what` proxies ("etcd", "placement", or both "etcd+placement") just before or
    right after b's claim; returns the consumers b was asked to claim."""
    services = zones["b"].services
    original = Scheduler.claim
    asked: list[str] = []

    def claim(self, destinations):
        through_b = self.config["etcd"]["endpoints"] == [services.etcd_endpoint]
        if through_b:
            asked.extend(d.uuid for d in destinations)
            if not after:
                for name in what.split("+"):
                    services.proxies[name].cut()
        original(self, destinations)
        if through_b and after:
            for name in what.split("+"):
                services.proxies[name].cut()

    monkeypatch.setattr(Scheduler, "claim", claim)
    return asked


def sweep(zones) -> list[str]:
    """What the next request at the parent would sweep first."""
    with ZoneTree(zones.parent.config) as tree:
        try:
            return journal.sweep(tree, zones.parent.config["zones"]["intent_grace_seconds"])
        finally:
            tree.root.scheduler.close()


def restore(zones) -> None:
    for proxy in zones["b"].services.proxies.values():
        proxy.restore()


def test_b_lost_at_its_claim_the_request_completes_elsewhere(zones, monkeypatch):
    hosts(zones)
    asked = cut_at_claim(monkeypatch, zones, "placement", after=False)
    placed = request(zones, 8)
    assert asked, "b was never asked: the test did not cut anything"
    assert len(placed) == 8 and "b" not in {p.zone for p in placed}
    # Whether b's Placement took the claim before it went is unknown: kept for the sweep.
    assert len(zones.parent.keys("/zone-intents/")) == 1
    restore(zones)
    monkeypatch.undo()
    assert "undone in b" in " ".join(sweep(zones))
    nothing_left(zones["b"])
    assert sum(len(z.specs()) for z in zones.all()) == 8
    assert zones.parent.keys("/zone-intents/") == []


def test_b_etcd_lost_after_its_claim_completes_elsewhere_and_b_is_swept_clean(zones,
                                                                             monkeypatch):
    hosts(zones)
    asked = cut_at_claim(monkeypatch, zones, "etcd", after=True)
    placed = request(zones, 10)
    assert asked and len(placed) == 10 and "b" not in {p.zone for p in placed}
    # b's claims were made, then b's etcd went: whether b wrote the specs is unknown, so
    # they are kept for the sweep, not freed blindly.
    assert set(zones["b"].allocations()) <= set(asked)
    assert len(zones.parent.keys("/zone-intents/")) == 1
    restore(zones)
    monkeypatch.undo()
    done = sweep(zones)
    assert len(done) == 1 and "undone in b" in done[0], done
    nothing_left(zones["b"])
    assert zones.parent.keys("/zone-intents/") == []
    assert sum(len(z.specs()) for z in zones.all()) == 10


@pytest.mark.parametrize("what", ["etcd", "etcd+placement"])
def test_b_lost_mid_request_with_no_room_elsewhere_leaves_nothing_anywhere(zones, monkeypatch,
                                                                            what):
    hosts(zones)
    asked = cut_at_claim(monkeypatch, zones, what, after=True)
    with pytest.raises(NoValidHost) as caught:
        request(zones, 14)  # 16 with b, 12 without it
    assert asked
    assert caught.value.reasons[0] == ("room for only 12 of the 14 instances requested "
                                       "across 4 zone(s); nothing was claimed")
    assert any(r.startswith("zone b: unreachable, skipped (lost during the request")
               for r in caught.value.reasons), caught.value.reasons
    for name in ("a", "c", "d", "parent"):
        nothing_left(zones[name])
    restore(zones)
    monkeypatch.undo()
    # The next request at the parent sweeps what b kept, and places what fits.
    run = zones.run(QUERY, "--count", "16")
    assert run.code == 0, run.stdout + run.stderr
    assert {z.name: len(z.specs()) for z in zones.all()} == {
        "hq": 0, "a": 4, "b": 4, "c": 4, "d": 4}
    assert all(set(z.allocations()) == set(z.specs()) for z in zones.all())
    assert zones.parent.keys("/zone-intents/") == []


def test_an_unreachable_zone_is_skipped_with_its_reason(zones):
    hosts(zones)
    zones["b"].services.proxies["etcd"].cut()
    listed = zones.run("zone", "list")
    assert listed.code == 0, listed.stderr
    row = next(line for line in listed.stdout.splitlines() if line.startswith("b "))
    assert row.split()[1] == "NO", listed.stdout
    etcd = zones["b"].services.etcd_endpoint
    assert f" etcd at {etcd} is unreachable (" in row, row
    assert all(f"{name} " in listed.stdout for name in ("a", "c", "c/d"))
    run = zones.run(QUERY, "--count", "13")
    assert run.code == 1
    lines = run.stdout.splitlines()
    assert "room for only 12 of the 13 instances requested across 4 zone(s); nothing " \
           "was claimed" in lines
    assert any(line.startswith("zone b: unreachable, skipped (etcd at 127.0.0.1:")
               for line in lines), lines
    run = zones.run(QUERY, "--count", "12")
    assert run.code == 0, run.stdout + run.stderr
    assert "IN ZONE b" not in run.stdout
    listed = zones.run("list")
    assert listed.code == 0 and len(listed.stdout.splitlines()) == 13
    assert "zone b unreachable, its instances not listed" in listed.stderr

"""Requests across zones, against five real installations (see conftest): spread by weight,
all or nothing across zones, routed by --zone, found again from the parent."""

from __future__ import annotations

import re
from collections import Counter

QUERY = "resources=VCPU:1,MEMORY_MB:256,DISK_GB:1"


def placed_by_zone(zones) -> dict[str, int]:
    """How many instances each zone holds, checked both ways: its claims and its specs."""
    counts = {}
    for zone in zones.all():
        claims, specs = zone.allocations(), zone.specs()
        assert set(claims) == set(specs), zone.name
        if specs:
            counts[zone.name] = len(specs)
    return counts


def notified(stdout: str) -> list[tuple[str, str, str]]:
    """(host, uuid, zone) of each NOTIFIED TARGET line ("" for the parent's own)."""
    return [(m.group(1), m.group(2), m.group(3) or "") for m in re.finditer(
        r"^NOTIFIED TARGET, (\S+), OF INSTANCE (\S+)(?: IN ZONE (\S+))?$", stdout, re.M)]


def test_equal_hosts_get_one_instance_each_whichever_zone_they_are_in(zones):
    hosts = {"hq": 1, "a": 2, "b": 2, "c": 1, "d": 1}
    for name, count in hosts.items():
        for i in range(count):
            zones[name if name != "hq" else "parent"].add_host(f"h{i}")
    run = zones.run(QUERY, "--count", "7", "--name", "spread")
    assert run.code == 0, run.stdout + run.stderr
    lines = notified(run.stdout)
    assert len(lines) == 7
    assert Counter(zone for _, _, zone in lines) == {"": 1, "a": 2, "b": 2, "c": 1, "c/d": 1}
    assert len({host for host, _, _ in lines}) == 7
    assert placed_by_zone(zones) == hosts


def test_a_zone_with_more_room_takes_more(zones):
    zones["a"].add_host("big", vcpu=16, memory_mb=8192, disk_gb=80)
    for name in ("b", "c", "d"):
        zones[name].add_host("small")
    run = zones.run(QUERY, "--count", "6")
    assert run.code == 0, run.stdout + run.stderr
    assert placed_by_zone(zones) == {"a": 6}
    run = zones.run(QUERY, "--count", "20")
    assert run.code == 0, run.stdout + run.stderr
    counts = placed_by_zone(zones)
    assert counts["a"] > max(counts[name] for name in ("b", "c", "d"))
    assert sum(counts.values()) == 26

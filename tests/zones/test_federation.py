"""Requests across zones, against five real installations (see conftest): spread by weight,
all or nothing across zones, routed by --zone, found again from the parent."""

from __future__ import annotations

import re
from collections import Counter

from etcd_compute.drivers.fake import boot_log
from tests.support import wait_for

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


def four_each(zones) -> None:
    """Room for 20 instances of QUERY: a 8 (two hosts), b, c, d 4 each, the parent none."""
    for name, count in {"a": 2, "b": 1, "c": 1, "d": 1}.items():
        for i in range(count):
            zones[name].add_host(f"h{i}")


def test_a_count_no_zone_could_take_alone_is_placed_across_zones(zones):
    four_each(zones)
    run = zones.run(QUERY, "--count", "14", "--name", "batch", "--json")
    assert run.code == 0, run.stdout + run.stderr
    placed = run.json()["instances"]
    assert sorted(p["name"] for p in placed) == sorted(f"batch-{n}" for n in range(1, 15))
    counts = placed_by_zone(zones)
    assert sum(counts.values()) == 14 and len(counts) >= 3 and max(counts.values()) <= 8
    assert Counter(p["zone"] for p in placed) == {
        {"d": "c/d"}.get(name, name): n for name, n in counts.items()}
    # The parent indexes each instance by its zone; no request is left in flight.
    index = zones.parent.store.read_prefix("zone_instance", zones.parent.store.keys.zone_index())
    assert {uuid: where["zone"] for uuid, where in index.items()} == {
        p["uuid"]: p["zone"] for p in placed}
    assert zones.parent.keys("/zone-intents/") == []


def test_a_count_over_the_sum_of_all_zones_leaves_nothing_anywhere(zones):
    four_each(zones)
    run = zones.run(QUERY, "--count", "21")
    assert run.code == 1, run.stderr
    lines = run.stdout.splitlines()
    assert lines[:2] == ["NO ALLOCATIONS LEFT", "room for only 20 of the 21 instances requested "
                                                "across 5 zone(s); nothing was claimed"]
    for zone, room in {"a": 8, "b": 4, "c": 4, "c/d": 4}.items():
        assert f"zone {zone}: room for {room}" in lines
    assert any(line.startswith("zone hq: resources=VCPU:1: no resource provider has any VCPU")
               for line in lines), lines
    assert placed_by_zone(zones) == {}
    assert zones.parent.keys("/zone-intents/") == zones.parent.keys("/zone-of/") == []


def test_zone_routes_a_request_to_one_zone_or_below(zones):
    four_each(zones)
    zones.parent.add_host("own")
    run = zones.run(QUERY, "--count", "3", "--zone", "c/d")
    assert run.code == 0, run.stderr
    assert {zone for _, _, zone in notified(run.stdout)} == {"c/d"}
    run = zones.run(QUERY, "--count", "3", "--zone", "c")  # c and what is below it
    assert run.code == 0, run.stderr
    assert placed_by_zone(zones) == {"c": 3, "d": 3}
    run = zones.run(QUERY, "--count", "5", "--zone", "hq")  # this zone's own hosts only
    assert run.code == 1 and "room for only 4 of the 5" in run.stdout
    run = zones.run(QUERY, "--zone", "hq")
    assert run.code == 0 and notified(run.stdout)[0][2] == ""
    run = zones.run(QUERY, "--zone", "nowhere")
    assert (run.code, run.stdout) == (2, "")
    assert run.stderr == "schedule.py: error: --zone: no zone nowhere (see schedule.py zone list)\n"


def test_an_instance_in_any_zone_is_shown_listed_and_destroyed_from_the_parent(zones):
    four_each(zones)
    run = zones.run(QUERY, "--count", "2", "--zone", "c/d", "--name", "deep")
    assert run.code == 0, run.stderr
    (_, first, _), (_, second, _) = notified(run.stdout)
    shown = zones.run(first)
    assert shown.code == 0, shown.stderr
    assert re.search(r"^state\s+SCHEDULED$", shown.stdout, re.M)
    assert re.search(r"^zone\s+c/d$", shown.stdout, re.M), shown.stdout
    # d answers for its own instances on its own.
    local = zones.run(first, "--json", zone="d")
    assert local.code == 0 and local.json()["name"] == "deep-1" and "zone" not in local.json()
    listed = zones.run("list", "--json")
    assert listed.code == 0, listed.stderr
    assert {(r["uuid"], r["zone"]) for r in listed.json()} == {(first, "c/d"), (second, "c/d")}
    table = zones.run("list").stdout.splitlines()
    assert table[0].split() == ["UUID", "NAME", "STATE", "HOST", "IP", "RESOURCES", "ZONE"]
    console = zones.run("console", first)
    assert (console.code, console.stderr) == (1, (
        f"schedule.py: error: console of {first} not published yet (state SCHEDULED); the "
        "compute publishes it once the instance is ACTIVE\n"))
    destroyed = zones.run("destroy", first)
    assert destroyed.stdout == f"DESTROY REQUESTED FOR INSTANCE {first}\n", destroyed.stderr
    d = zones["d"]
    spec, _ = d.store.read("instance_spec", d.store.keys.spec(d.specs()[first], first))
    assert spec["action"] == "destroy"
    # Gone from d (its host finished the destroy): the parent forgets it when asked.
    d.store.delete(d.store.keys.spec(d.specs()[first], first))
    d.store.delete(d.store.keys.record(spec["host"], first))
    gone = zones.run(first)
    assert gone.code == 1 and "no instance" in gone.stderr
    assert zones.parent.store.get(zones.parent.store.keys.zone_of(first)) is None
    assert zones.parent.store.get(zones.parent.store.keys.zone_of(second)) is not None


def test_a_real_compute_in_a_grandchild_builds_what_the_parent_placed(zones, compute_config,
                                                                      start_compute):
    """compute.py (fake driver, two simulated hosts) in d; the parent schedules there, waits
    for ACTIVE, reads the console and destroys it, as if d were its own zone."""
    d = zones["d"]
    config = {**compute_config, "etcd": d.config["etcd"], "placement": d.config["placement"]}
    compute = start_compute(config, "--fake-hosts", "2")
    wait_for(lambda: len(d.keys("/alive/")) == 2, what="d's two fake hosts alive")
    run = zones.run(QUERY, "--count", "2", "--wait", "--name", "far")
    assert run.code == 0, run.stdout + run.stderr + compute.log()
    (_, first, zone), _ = notified(run.stdout)
    assert zone == "c/d"
    assert re.search(rf"^{first} ACTIVE on \S+ ip=\S+$", run.stdout, re.M), run.stdout
    console = wait_for(lambda: (lambda r: r if r.code == 0 else None)(
        zones.run("console", first)), what="console published")
    assert console.stdout == boot_log(first)
    # Lifecycle actions go to d as destroy does: the resize claims in d's Placement.
    for words in (["stop", first], ["resize", "resources=VCPU:2,MEMORY_MB:512,DISK_GB:1", first],
                  ["start", first]):
        done = zones.run(*words, "--wait")
        assert done.code == 0, done.stderr + compute.log()
    (claim,) = d.allocations()[first].values()
    assert claim == {"VCPU": 2, "MEMORY_MB": 512, "DISK_GB": 1}
    events = zones.run("events", first, "--json")
    assert [e["action"] for e in events.json()] == ["create", "stop", "resize", "start"]
    gone = zones.run("destroy", first, "--wait")
    assert gone.code == 0, gone.stderr
    assert f"{first} DELETED" in gone.stdout
    assert first not in d.allocations() and len(d.allocations()) == 1

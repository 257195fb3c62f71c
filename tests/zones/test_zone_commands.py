"""schedule.py zone add|list|show|info|delete against real zones: credentials checked before
they are recorded, capabilities as each zone's Placement reports them, delete refused while
a zone holds instances placed from here."""

from __future__ import annotations

import os
import re
import shutil

import pytest

from etcd_compute.etcd import Store
from etcd_compute.etcd_connection import PermissionDenied
from etcd_compute.zones import registry

QUERY = "resources=VCPU:1,MEMORY_MB:256,DISK_GB:1"


def from_placement(zone, free_vcpu_up: list[int]) -> dict[str, dict[str, int]]:
    """Per resource class: capacity, used and free over every provider of the zone, as its
    Placement reports them (the figures `zone info` must add up to); the free VCPU of each
    host that is up goes to `free_vcpu_up`."""
    totals: dict[str, dict[str, int]] = {}
    for provider in zone.placement.list_providers():
        usages = zone.placement.get_usages(provider["uuid"])
        up = zone.store.get(zone.store.keys.alive(provider["uuid"])) is not None
        for rc, inv in zone.placement.get_inventories(provider["uuid"]).items():
            row = totals.setdefault(rc, {"capacity": 0, "used": 0, "free": 0})
            capacity = int((inv["total"] - inv["reserved"]) * inv["allocation_ratio"])
            row["capacity"] += capacity
            row["used"] += usages.get(rc, 0)
            row["free"] += capacity - usages.get(rc, 0)
            if up and rc == "VCPU":
                free_vcpu_up.append(capacity - usages.get(rc, 0))
    return totals


# Once in 4 runs (at the run's start, every worker starting its services) zone b's
# Placement, behind its cuttable proxy, answered zone info with a reset connection.
@pytest.mark.flaky(reruns=1)
def test_zone_info_adds_up_what_each_zones_placement_reports(zones):
    zones.parent.add_host("own", vcpu=2)
    for name, vcpu in {"a": 8, "b": 4, "c": 6, "d": 16}.items():
        zones[name].add_host("h0", vcpu=vcpu, memory_mb=512 * vcpu)
    zones["a"].add_host("h1")
    zones["d"].add_host("down", vcpu=3, memory_mb=1024)
    zones["d"].store.delete(zones["d"].store.keys.alive(zones["d"].placement.list_providers(
        name="d-down")[0]["uuid"]))
    assert zones.run(QUERY, "--count", "9").code == 0
    run = zones.run("zone", "info", "--json")
    assert run.code == 0, run.stderr
    info = run.json()
    assert info["name"] == "hq" and info["unreachable"] == {}
    assert set(info["zones"]) == {"hq", "a", "b", "c", "c/d"}
    expected: dict[str, dict[str, int]] = {}
    free_vcpu_up: list[int] = []
    for zone in zones.all():
        label = {"d": "c/d"}.get(zone.name, zone.name)
        mine = from_placement(zone, free_vcpu_up)
        got = {rc: {k: row[k] for k in ("capacity", "used", "free")}
               for rc, row in info["zones"][label]["resources"].items()}
        assert got == mine, label
        for rc, row in mine.items():
            into = expected.setdefault(rc, {"capacity": 0, "used": 0, "free": 0})
            for key in row:
                into[key] += row[key]
    assert {rc: {k: row[k] for k in ("capacity", "used", "free")}
            for rc, row in info["total"]["resources"].items()} == expected
    assert sum(expected[rc]["used"] for rc in ("VCPU",)) == 9
    total = info["total"]
    assert (total["hosts_up"], total["hosts_down"]) == (6, 1)
    # The seed's <service>_<capability> = <min>,<max>: free VCPU on one host that is up.
    text = zones.run("zone", "info").stdout
    assert len(free_vcpu_up) == 6
    assert re.search(rf"^compute_VCPU +{min(free_vcpu_up)},{max(free_vcpu_up)}$", text, re.M)
    assert re.search(r"^hosts +6 up, 1 down, 0 disabled$", text, re.M), text
    # Below one zone only: c and c/d.
    shown = zones.run("zone", "show", "c", "--json").json()
    assert set(shown["zones"]) == {"c", "c/d"}
    assert shown["record"]["etcd"]["endpoints"] == [zones["c"].services.etcd_endpoint]
    assert shown["total"]["resources"]["VCPU"]["capacity"] == 6 + 16 + 3


def test_zone_add_list_delete(zones, tmp_path):
    services = zones["a"].services
    issued = services.pki.issue("operator", "operator")
    base = ["zone", "add", "lab2", "--etcd", services.etcd.endpoint, "--etcd-prefix",
            zones["a"].config["etcd"]["prefix"], "--placement", services.placement.endpoint,
            "--ca-cert", str(services.pki.ca_cert), "--cert", str(issued.cert)]
    # A key others may read is refused before anything is recorded.
    loose = tmp_path / "loose.key"
    shutil.copy(issued.key, loose)
    os.chmod(loose, 0o644)
    run = zones.run(*base, "--cert-key", str(loose))
    assert (run.code, run.stdout) == (2, "")
    assert run.stderr == (f"schedule.py: error: zone lab2: key {loose}: a private key readable "
                          "by group or others (mode 0644); chmod 600 it\n")
    other = zones["b"].services.pki.issue("operator", "operator")
    run = zones.run(*base, "--cert-key", str(other.key))
    assert run.code == 2 and f"{other.key}: does not match {issued.cert}" in run.stderr
    assert zones.parent.store.get(zones.parent.store.keys.zone("lab2")) is None

    run = zones.run(*base, "--cert-key", str(issued.key))
    assert run.code == 0, run.stderr
    assert run.stdout.startswith("ZONE lab2 ADDED (reachable: hypervisor=-, hosts=0 up;0 down")
    again = zones.run(*base, "--cert-key", str(issued.key))
    assert again.stderr == ("schedule.py: error: zone lab2 exists; delete it first to "
                            "change it\n")
    listed = zones.run("zone", "list")
    assert listed.code == 0, listed.stderr
    assert [line.split()[0] for line in listed.stdout.splitlines()] == [
        "NAME", "a", "b", "c", "c/d", "lab2"]
    assert all(line.split()[1] == "yes" for line in listed.stdout.splitlines()[1:])

    zones["a"].add_host("h0")
    run = zones.run(QUERY, "--zone", "lab2")
    assert run.code == 0, run.stderr
    refused = zones.run("zone", "delete", "lab2")
    assert refused.code == 1
    assert refused.stderr.startswith("schedule.py: error: zone lab2 holds 1 instance(s) placed "
                                     "from here")
    forced = zones.run("zone", "delete", "lab2", "--force")
    assert forced.stdout == ("ZONE lab2 DELETED (1 instance(s) placed there forgotten here; "
                             "they keep running)\n"), forced.stderr
    assert zones.parent.keys("/zone-of/") == []
    assert len(zones["a"].specs()) == 1  # nothing in the zone itself changed
    # Deleting a zone whose instances were destroyed there needs no --force.
    zones["b"].add_host("h0")
    run = zones.run(QUERY, "--zone", "b")
    assert run.code == 0, run.stderr
    for key in zones["b"].keys("/"):
        zones["b"].store.delete(zones["b"].store.keys.prefix + key)
    assert zones.run("zone", "delete", "b").stdout == "ZONE b DELETED\n"


@pytest.mark.parametrize(("args", "fault"), [
    (["zone", "add", "Bad_Name", "--etcd", "h:1", "--placement", "http://h"], "'Bad_Name'"),
    (["zone", "add", "hq", "--etcd", "h:1", "--placement", "http://h"], "this zone's own name"),
    (["zone", "add", "x", "--placement", "http://h"], "--etcd and --placement are required"),
    (["zone", "add", "x", "--etcd", "h:1", "--placement", "ftp://h"], "placement.endpoint"),
    (["zone", "add", "x", "--etcd", "h:1", "--placement", "http://h", "--cert-key", "/etc"],
     "a certificate and its key go together"),
    (["zone", "add", "x", "--etcd", "h:1", "--placement", "http://h", "--ca-cert",
      "/nonexistent/ca.crt"], "ca_cert /nonexistent/ca.crt: cannot read"),
    (["zone", "show", "a/../b"], "'..'"),
    (["zone", "delete", "nowhere"], "no zone 'nowhere'"),
    (["zone", "frob"], "expected zone add|list|show|info|delete"),
    (["list", "--etcd", "h:1"], "--etcd goes with zone add"),
    (["list", "--force"], "--force goes with zone delete"),
])
def test_bad_zone_commands_are_one_line(zones, args, fault):
    run = zones.run(*args)
    assert run.code == 2 and run.stdout == "", run.stdout + run.stderr
    assert run.stderr.startswith("schedule.py: error: ") and run.stderr.count("\n") == 1
    assert fault in run.stderr


def test_only_operators_read_the_zones(zones, host_credentials):
    """A compute host's certificate reaches neither the zone records (credential paths) nor
    the index of where instances went."""
    host = host_credentials("00000000-0000-4000-8000-0000000000aa")
    with Store({**host["etcd"], "prefix": zones.parent.store.keys.prefix}) as store:
        for key in (store.keys.zone("a"), store.keys.zone_of("x"), store.keys.zone_intent("x")):
            with pytest.raises(PermissionDenied):
                store.get(key)
        with pytest.raises(PermissionDenied):
            store.put("zone", store.keys.zone("evil"), zones.entry("a") | {"name": "evil"})


def test_a_childs_record_naming_files_outside_credential_dirs_is_not_followed(zones):
    """c's etcd is c's operator's: a record there may name any file on this machine. Only
    files under zones.credential_dirs are used for zones below a child."""
    c = zones["c"].store
    evil = zones.entry("a") | {"name": "evil"}
    c.put("zone", c.keys.zone("evil"), evil)
    listed = zones.run("zone", "list")
    row = next(line for line in listed.stdout.splitlines() if line.startswith("c/evil"))
    assert row.split()[1] == "NO" and " zone evil: ca_cert " in row
    assert "is not under zones.credential_dirs" in row
    # A record written under another zone's name, or not a zone at all, is named and skipped.
    c.put("zone", c.keys.zone("other"), evil)
    c.client.put(c.keys.zone("junk"), b"{\"name\": 1}")
    rows = zones.run("zone", "list").stdout
    assert "its record names another zone (evil)" in rows
    assert "its record is unreadable" in rows


def test_a_record_pointing_back_up_is_a_loop_not_a_hang(zones):
    d = zones["d"].store
    c_entry = zones.entry("c") | {"name": "up"}
    # Files of c's CA are where d's are not allowed; allow them for this test's record.
    c_entry = registry.record("up", c_entry["etcd"]["endpoints"], c_entry["etcd"]["prefix"],
                              c_entry["placement"]["endpoint"])
    d.put("zone", d.keys.zone("up"), c_entry)
    row = next(line for line in zones.run("zone", "list").stdout.splitlines()
               if line.startswith("c/d/up"))
    assert row.split()[1] == "NO" and "a loop: its etcd is that of a zone above it" in row



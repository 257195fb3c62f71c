"""os-hosts (admins, up to 2.42): compute hosts by name, their size and use with each
project's part, status as os-services' disable; maintenance and power actions 501."""

from __future__ import annotations

from etcd_compute.placement import DISABLED_TRAIT
from tests.unit.api.harness import Harness


def test_hosts_are_listed_by_zone_and_shown_with_each_projects_part():
    harness = Harness.new()
    harness.add_host("hv1", vcpus=16, ram=16384, disk=500)
    harness.add_flavor()
    uuid = harness.boot()
    harness.activate(uuid)
    listed = harness.admin("GET", "/v2.1/os-hosts").json["hosts"]
    assert listed == [{"host_name": "hv1", "service": "compute", "zone": "nova"}]
    assert harness.admin("GET", "/v2.1/os-hosts?zone=nova").json["hosts"] == listed
    assert harness.admin("GET", "/v2.1/os-hosts?zone=").json["hosts"] == listed
    assert harness.admin("GET", "/v2.1/os-hosts?zone=elsewhere").json["hosts"] == []
    rows = {r["resource"]["project"]: r["resource"]
            for r in harness.admin("GET", "/v2.1/os-hosts/hv1").json["host"]}
    assert set(rows) == {"(total)", "(used_now)", "(used_max)", "p1"}
    assert (rows["(total)"]["cpu"], rows["(total)"]["memory_mb"],
            rows["(total)"]["disk_gb"]) == (16, 16384, 500)
    assert rows["p1"]["cpu"] == rows["(used_now)"]["cpu"] > 0
    assert harness.admin("GET", "/v2.1/os-hosts/nowhere").status_int == 404
    # Members are refused; from 2.43 the resource is gone, as in Nova.
    assert harness.call("GET", "/v2.1/os-hosts").status_int == 403
    assert harness.admin("GET", "/v2.1/os-hosts", version="2.43").status_int == 404


def test_status_is_a_host_disable_and_the_rest_is_not_supported():
    harness = Harness.new()
    rp = harness.add_host("hv1")
    answer = harness.admin("PUT", "/v2.1/os-hosts/hv1", {"status": "disable"})
    assert answer.json == {"host": "hv1", "status": "disabled"}
    assert DISABLED_TRAIT in harness.placement.get_traits(rp)
    answer = harness.admin("PUT", "/v2.1/os-hosts/hv1", {"status": "enable"})
    assert answer.json == {"host": "hv1", "status": "enabled"}
    assert DISABLED_TRAIT not in harness.placement.get_traits(rp)
    for body in ({}, {"status": "invalid"}, {"status": "enable", "maintenance_mode": "x"},
                 {"status": "enable", "other": 1}):
        assert harness.admin("PUT", "/v2.1/os-hosts/hv1", body).status_int == 400, body
    assert harness.admin("PUT", "/v2.1/os-hosts/nowhere", {"status": "enable"}).status_int \
        == 404
    assert harness.admin("PUT", "/v2.1/os-hosts/hv1",
                         {"maintenance_mode": "enable"}).status_int == 501
    for action in ("startup", "shutdown", "reboot"):
        assert harness.admin("GET", f"/v2.1/os-hosts/hv1/{action}").status_int == 501
        assert harness.admin("GET", f"/v2.1/os-hosts/nowhere/{action}").status_int == 404
        assert harness.call("GET", f"/v2.1/os-hosts/hv1/{action}").status_int == 403

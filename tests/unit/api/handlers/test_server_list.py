"""Listing servers: a project's own, Nova's filters (a member's subset), sorting,
limit/marker and the next link; all_tenants is the admin's."""

from __future__ import annotations

import time

import pytest

from tests.unit.api.harness import ADMIN, Harness
from tests.unit.fake_neutron import FakeNeutron


@pytest.fixture
def harness(harness: Harness) -> Harness:
    """The usual world and the m1.small flavor to resize to."""
    harness.add_flavor("2", "m1.small", vcpus=2, ram=512, disk=2)
    return harness


def names(response) -> list[str]:
    assert response.status_int == 200, response.text
    return [s["name"] for s in response.json["servers"]]


def test_a_member_lists_its_project_newest_first(harness: Harness):
    for name in ("a", "b", "c"):
        harness.boot(name)
        time.sleep(0.01)
    harness.boot("theirs", project="p2")
    assert names(harness.call("GET", "/v2.1/servers")) == ["c", "b", "a"]
    detail = harness.call("GET", "/v2.1/servers/detail").json["servers"]
    assert {s["tenant_id"] for s in detail} == {"p1"} and detail[0]["status"] == "BUILD"
    assert names(harness.call("GET", "/v2.1/servers?sort_key=display_name&sort_dir=asc")) == \
        ["a", "b", "c"]


def test_filters_as_nova_has_them(harness: Harness):
    one = harness.boot("web-1")
    harness.boot("db-1", flavorRef="2")
    harness.activate(one)
    assert names(harness.call("GET", "/v2.1/servers?name=^web")) == ["web-1"]
    assert names(harness.call("GET", "/v2.1/servers?status=active")) == ["web-1"]
    assert names(harness.call("GET", "/v2.1/servers?flavor=2")) == ["db-1"]
    assert names(harness.call("GET", "/v2.1/servers?ip=192.168")) == ["web-1"]
    assert names(harness.call("GET", "/v2.1/servers?image=file:///dev/null")) == \
        ["db-1", "web-1"]
    # A filter a member may not use is dropped (Nova's), not applied.
    assert names(harness.call("GET", "/v2.1/servers?host=nowhere")) == ["db-1", "web-1"]
    assert names(harness.call("GET", "/v2.1/servers?host=nowhere", roles=ADMIN)) == []
    assert names(harness.call("GET", "/v2.1/servers?status=NONSENSE")) == []
    assert harness.call("GET", "/v2.1/servers?status=NONSENSE",
                        version="2.38").status_int == 400
    assert harness.call("GET", "/v2.1/servers?name=(", version="2.1").status_int == 400
    assert harness.call("GET", "/v2.1/servers?metadata=x").status_int == 200  # dropped
    assert harness.call("GET", "/v2.1/servers?metadata=x", roles=ADMIN).status_int == 400
    assert harness.call("GET", "/v2.1/servers?bogus=1", version="2.75").status_int == 400
    # From 2.83 a member may filter by more (vm_state, key_name, user_id...).
    assert names(harness.call("GET", "/v2.1/servers?vm_state=active")) == ["db-1", "web-1"]
    assert names(harness.call("GET", "/v2.1/servers?vm_state=active", version="2.83")) == \
        ["web-1"]


def test_changes_since_and_before(harness: Harness):
    harness.boot("old")
    later = time.time() + 0.5
    stamp = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(later + 1))
    assert names(harness.call("GET", f"/v2.1/servers?changes-since={stamp}")) == []
    assert names(harness.call("GET", f"/v2.1/servers?changes-before={stamp}",
                              version="2.66")) == ["old"]
    early = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(later - 3600))
    assert harness.call("GET", f"/v2.1/servers?changes-since={stamp}&changes-before={early}",
                        version="2.66").status_int == 400


def test_all_tenants_is_the_admins(harness: Harness):
    harness.boot("mine")
    harness.boot("theirs", project="p2")
    refused = harness.call("GET", "/v2.1/servers?all_tenants=1")
    assert refused.status_int == 403
    assert names(harness.call("GET", "/v2.1/servers?all_tenants=1", roles=ADMIN)) == \
        ["theirs", "mine"]
    assert names(harness.call("GET", "/v2.1/servers?all_tenants=1&project_id=p2",
                              roles=ADMIN)) == ["theirs"]
    assert names(harness.call("GET", "/v2.1/servers?all_tenants=0", roles=ADMIN)) == ["mine"]
    assert harness.call("GET", "/v2.1/servers?sort_key=host").status_int == 403


def test_limit_marker_and_next_links(harness: Harness):
    made = [harness.boot(f"s{n}") for n in range(3)]
    first = harness.call("GET", "/v2.1/servers?limit=2").json
    assert [s["id"] for s in first["servers"]] == made[:0:-1]
    assert first["servers_links"][0]["href"].endswith(f"limit=2&marker={made[1]}")
    rest = harness.call("GET", f"/v2.1/servers?limit=2&marker={made[1]}").json
    assert [s["id"] for s in rest["servers"]] == [made[0]] and "servers_links" not in rest
    assert harness.call("GET", "/v2.1/servers?marker=nope").status_int == 400


def test_under_neutron_a_page_asks_for_its_ports_once():
    neutron = FakeNeutron()
    harness = Harness.new(neutron=neutron)
    harness.add_host()
    harness.add_flavor()
    net = neutron.add_network("p1", "private", cidr="10.0.0.0/24")
    v6 = neutron.add_network("p1", "v6", cidr="fd00::/64")
    servers = [harness.boot(name=f"s{i}", networks=[{"uuid": net["id"]}]) for i in range(3)]
    # The hosts' part (making the ports) stood in for: ports whose device is each server.
    ports = [neutron.add_port(net, device_id=uuid) for uuid in servers]
    extra = neutron.add_port(v6, device_id=servers[0], ip="fd00::5")
    neutron.calls.clear()
    listed = harness.call("GET", "/v2.1/servers/detail").json["servers"]
    assert [c[1] for c in neutron.calls] == ["ports", "networks", "floatingips"]
    assert neutron.calls[0][2] == {"device_id": [s["id"] for s in listed]}
    by_id = {s["id"]: s["addresses"] for s in listed}
    assert by_id[servers[1]] == {"private": [{
        "version": 4, "addr": ports[1]["fixed_ips"][0]["ip_address"],
        "OS-EXT-IPS:type": "fixed", "OS-EXT-IPS-MAC:mac_addr": ports[1]["mac_address"]}]}
    assert by_id[servers[0]]["v6"] == [{
        "version": 6, "addr": "fd00::5", "OS-EXT-IPS:type": "fixed",
        "OS-EXT-IPS-MAC:mac_addr": extra["mac_address"]}]
    shown = harness.show(servers[2])
    assert shown["addresses"] == by_id[servers[2]]
    # A floating IP follows its port's fixed ones (Nova's order), typed floating.
    neutron.add_floating_ip(ports[1], "203.0.113.7")
    assert harness.show(servers[1])["addresses"]["private"][1] == {
        "version": 4, "addr": "203.0.113.7", "OS-EXT-IPS:type": "floating",
        "OS-EXT-IPS-MAC:mac_addr": ports[1]["mac_address"]}
    assert harness.call("GET", f"/v2.1/servers/{servers[1]}/ips").json["addresses"][
        "private"][1] == {"version": 4, "addr": "203.0.113.7"}
    # Before 2.75 an update answers the addresses without their extended attributes.
    renamed = harness.call("PUT", f"/v2.1/servers/{servers[2]}", {"server": {"name": "r"}})
    assert renamed.json["server"]["addresses"] == {"private": [
        {"version": 4, "addr": ports[2]["fixed_ips"][0]["ip_address"]}]}


def test_under_neutron_another_projects_ports_are_not_shown():
    neutron = FakeNeutron()
    harness = Harness.new(neutron=neutron)
    harness.add_host()
    harness.add_flavor()
    neutron.add_network("p1")
    uuid = harness.boot()
    # A port of another project's claiming p1's server as its device: p1 does not see it.
    neutron.add_port(neutron.add_network("p2"), device_id=uuid)
    assert harness.show(uuid)["addresses"] == {}


def test_under_neutron_ip_and_ip6_filter_by_the_ports_addresses():
    neutron = FakeNeutron()
    harness = Harness.new(neutron=neutron)
    harness.add_host()
    harness.add_flavor()
    v4, v6 = neutron.add_network("p1", cidr="10.0.0.0/24"), neutron.add_network(
        "p1", "v6", cidr="fd00::/64")
    a, b = (harness.boot(name=n, networks=[{"uuid": v4["id"]}]) for n in ("a", "b"))
    # The hosts' part (making the ports) stood in for by the fake.
    neutron.add_port(v4, device_id=a, ip="10.0.0.15")
    neutron.add_port(v4, device_id=b, ip="10.0.0.150")
    neutron.add_port(v6, device_id=b, ip="fd00::15")

    def names(query: str) -> list[str]:
        answer = harness.call("GET", f"/v2.1/servers?{query}", version="2.5")
        return sorted(s["name"] for s in answer.json["servers"])

    assert names("ip=10.0.0.15") == ["a", "b"]  # Nova's: a match from the start
    assert names("ip=10.0.0.15$") == ["a"]
    assert names("ip=0.0.15") == []
    assert names("ip6=fd00::15") == ["b"]
    assert names("ip=10.9&ip6=fd00") == ["b"]  # either


def test_under_neutron_an_unreachable_neutron_is_503_and_a_plain_list_does_not_ask():
    from etcd_compute.errors import NeutronUnavailable

    neutron = FakeNeutron()
    harness = Harness.new(neutron=neutron)
    harness.add_host()
    harness.add_flavor()
    neutron.add_network("p1")
    uuid = harness.boot()

    def unreachable(_context):
        raise NeutronUnavailable("Neutron: https://neutron.example is unreachable")

    harness.backend.neutron = unreachable
    for path in (f"/v2.1/servers/{uuid}", "/v2.1/servers/detail",
                 f"/v2.1/servers/{uuid}/ips"):
        answer = harness.call("GET", path)
        assert answer.status_int == 503 and "Neutron" in answer.text, answer.text
    assert harness.call("GET", "/v2.1/servers").json["servers"][0]["id"] == uuid

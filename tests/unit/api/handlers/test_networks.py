"""/os-networks (up to 2.35): the one network every server is on, read only."""

from __future__ import annotations

from etcd_compute.api.handlers.networks import network_id
from tests.unit.api.harness import Harness


def test_the_servers_network_is_listed_and_shown_until_2_36():
    harness = Harness.new()
    listed = harness.call("GET", "/v2.1/os-networks").json["networks"]
    assert [(n["id"], n["label"]) for n in listed] == [(network_id("etcd-compute"),
                                                        "etcd-compute")]
    assert "bridge" not in listed[0]  # admins' fields
    assert "bridge" in harness.admin("GET", "/v2.1/os-networks").json["networks"][0]
    shown = harness.call("GET", f"/v2.1/os-networks/{listed[0]['id']}").json["network"]
    assert shown == listed[0]
    assert harness.call("GET", "/v2.1/os-networks/nope").status_int == 404
    assert harness.call("GET", "/v2.1/os-networks", version="2.36").status_int == 404


def test_under_neutron_the_networks_the_caller_sees():
    from tests.unit.api.harness import Harness
    from tests.unit.fake_neutron import FakeNeutron

    neutron = FakeNeutron()
    harness = Harness.new(neutron=neutron)
    mine, shared = neutron.add_network("p1", "mine"), neutron.add_network("o", "pub",
                                                                        shared=True)
    theirs = neutron.add_network("p2", "theirs")
    listed = harness.call("GET", "/v2.1/os-networks").json["networks"]
    assert sorted((n["id"], n["label"]) for n in listed) == sorted(
        [(mine["id"], "mine"), (shared["id"], "pub")])
    assert all(n["cidr"] is None for n in listed)
    shown = harness.call("GET", f"/v2.1/os-networks/{mine['id']}").json["network"]
    assert (shown["id"], shown["label"]) == (mine["id"], "mine")
    answer = harness.call("GET", f"/v2.1/os-networks/{theirs['id']}")
    assert (answer.status_int, answer.json["itemNotFound"]["message"]) == (
        404, "Network not found")


def test_tenant_networks_under_neutron_until_2_36_and_not_under_libvirt():
    from tests.unit.fake_neutron import FakeNeutron

    neutron = FakeNeutron()
    harness = Harness.new(neutron=neutron)
    mine = neutron.add_network("p1", "mine")
    neutron.add_network("p2", "theirs")
    listed = harness.call("GET", "/v2.1/os-tenant-networks").json["networks"]
    assert listed == [{"id": mine["id"], "cidr": "None", "label": "mine"}]
    shown = harness.call("GET", f"/v2.1/os-tenant-networks/{mine['id']}").json["network"]
    assert shown == listed[0]
    assert harness.call("GET", "/v2.1/os-tenant-networks/" + "1" * 32).status_int == 404
    assert harness.call("GET", "/v2.1/os-tenant-networks", version="2.36").status_int == 404
    assert Harness.new().call("GET", "/v2.1/os-tenant-networks").status_int == 404

"""A server's addresses (/servers/{id}/ips) on our network."""

from __future__ import annotations

from tests.unit.api.harness import Harness
from tests.unit.fake_neutron import FakeNeutron


def test_ips_list_the_address_on_our_network():
    harness = Harness.new()
    harness.add_host()
    harness.add_flavor()
    uuid = harness.boot()
    assert harness.call("GET", f"/v2.1/servers/{uuid}/ips").json == {"addresses": {}}
    harness.activate(uuid, ip="192.168.123.7")
    assert harness.call("GET", f"/v2.1/servers/{uuid}/ips").json == {
        "addresses": {"etcd-compute": [{"version": 4, "addr": "192.168.123.7"}]}}
    assert harness.call("GET", f"/v2.1/servers/{uuid}/ips/etcd-compute").json == {
        "etcd-compute": [{"version": 4, "addr": "192.168.123.7"}]}
    missing = harness.call("GET", f"/v2.1/servers/{uuid}/ips/other")
    assert missing.status_int == 404
    assert missing.json["itemNotFound"]["message"] == \
        "Instance is not a member of specified network"


def test_under_neutron_the_ports_fixed_ips_by_network_name():
    neutron = FakeNeutron()
    harness = Harness.new(neutron=neutron)
    harness.add_host()
    harness.add_flavor()
    net = neutron.add_network("p1", "private")
    uuid = harness.boot()
    assert harness.call("GET", f"/v2.1/servers/{uuid}/ips").json == {"addresses": {}}
    # The host's part (making the port) stood in for: a port whose device is the server.
    neutron.add_port(net, device_id=uuid, ip="10.0.0.5")
    assert harness.call("GET", f"/v2.1/servers/{uuid}/ips").json == {
        "addresses": {"private": [{"version": 4, "addr": "10.0.0.5"}]}}
    assert harness.call("GET", f"/v2.1/servers/{uuid}/ips/private").json == {
        "private": [{"version": 4, "addr": "10.0.0.5"}]}
    assert harness.call("GET", f"/v2.1/servers/{uuid}/ips/etcd-compute").status_int == 404

"""A server's addresses (/servers/{id}/ips) on our network."""

from __future__ import annotations

from tests.unit.api.harness import Harness


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

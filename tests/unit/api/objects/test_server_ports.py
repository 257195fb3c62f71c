"""A page of servers' ports: one request for the ports, one for their networks' names."""

from __future__ import annotations

from etcd_compute.api.objects.server_ports import ServerPorts
from tests.unit.fake_neutron import FakeNeutron


def test_a_page_is_three_requests_and_no_server_is_none() -> None:
    neutron = FakeNeutron()
    net = neutron.add_network("p1", "private")
    a, b = neutron.add_port(net, device_id="a"), neutron.add_port(net, device_id="b")
    neutron.add_floating_ip(b, "203.0.113.9")
    found = ServerPorts.of(neutron.as_caller("p1"), ["a", "b", "a"])
    assert [c[1] for c in neutron.calls] == ["ports", "networks", "floatingips"]
    assert found.floating == {b["id"]: ["203.0.113.9"]}
    assert neutron.calls[0][2] == {"device_id": ["a", "b"]}
    assert found.of_server("a") == [a] and found.of_server("b") == [b]
    assert found.network_name(net["id"]) == "private"
    neutron.calls.clear()
    assert ServerPorts.of(neutron.as_caller("p1"), []) == ServerPorts() and not neutron.calls


def test_a_network_the_caller_does_not_see_is_named_by_its_id() -> None:
    neutron = FakeNeutron()
    theirs = neutron.add_network("p2", "theirs")
    neutron.add_port(theirs, project="p1", device_id="a")
    found = ServerPorts.of(neutron.as_caller("p1"), ["a"])
    assert found.network_name(theirs["id"]) == theirs["id"]
    assert ServerPorts.of(neutron.as_caller("p1"), ["a"], names=False).networks == {}


def test_many_networks_are_asked_for_in_slices() -> None:
    neutron = FakeNeutron()
    servers = [f"s{i}" for i in range(60)]
    for server in servers:
        neutron.add_port(neutron.add_network("p1", server, cidr=None), device_id=server)
    found = ServerPorts.of(neutron.as_caller("p1"), servers)
    asked = [c[2]["id"] for c in neutron.calls if c[1] == "networks"]
    assert [len(ids) for ids in asked] == [50, 10]
    assert found.network_name(found.of_server("s59")[0]["network_id"]) == "s59"

"""A page of servers' ports: one request for the ports, one for their networks' names."""

from __future__ import annotations

from etcd_compute.api.objects.server_ports import ServerPorts
from tests.unit.fake_neutron import FakeNeutron


def test_a_page_is_two_requests_and_no_server_is_none() -> None:
    neutron = FakeNeutron()
    net = neutron.add_network("p1", "private")
    a, b = neutron.add_port(net, device_id="a"), neutron.add_port(net, device_id="b")
    found = ServerPorts.of(neutron.as_caller("p1"), ["a", "b", "a"])
    assert [c[1] for c in neutron.calls] == ["ports", "networks"]
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

"""Nova's validate_networks over a fake Neutron (the handlers' answers are in
tests/unit/api/handlers/test_server_networks.py)."""

from __future__ import annotations

import pytest

from etcd_compute.api.objects import requested_networks as requested
from tests.unit.fake_neutron import FakeNeutron


def test_one_request_asks_for_every_network_at_once() -> None:
    neutron = FakeNeutron()
    a, b = neutron.add_network("p1", "a"), neutron.add_network("p1", "b")
    asked = [{"uuid": a["id"]}, {"uuid": b["id"]}, {"uuid": a["id"]}]
    assert requested.networks(neutron.as_caller("p1"), "p1", asked) == asked
    assert [c for c in neutron.calls if c[1] == "networks"] == [
        ("GET", "networks", {"id": sorted({a["id"], b["id"]})})]


def test_the_missing_networks_are_named_together() -> None:
    neutron = FakeNeutron()
    theirs, ours = neutron.add_network("p2"), neutron.add_network("p1")
    gone = "00000000-0000-4000-8000-000000000000"
    with pytest.raises(requested.NetworkNotFound) as caught:
        requested.networks(neutron.as_caller("p1"), "p1",
                           [{"uuid": theirs["id"]}, {"uuid": ours["id"]}, {"uuid": gone}])
    assert str(caught.value) == f"Network {theirs['id']}, {gone} could not be found."
    assert caught.value.code == 400


def test_an_admin_sees_any_projects_network_and_port() -> None:
    """Its host is told the caller saw the network (the project does not: its port there
    is made as Nova makes it with the admin's token)."""
    neutron = FakeNeutron()
    net = neutron.add_network("p2")
    port = neutron.add_port(net)
    assert requested.networks(neutron.as_caller("admin", is_admin=True), "admin",
                              [{"uuid": net["id"]}, {"port": port["id"]}]) == [
        {"uuid": net["id"], "caller_sees": True}, {"port": port["id"]}]


def test_a_shared_or_external_network_is_seen_by_anyone() -> None:
    neutron = FakeNeutron()
    shared = neutron.add_network("ops", shared=True)
    external = neutron.add_network("ops", external=True, cidr="203.0.113.0/24")
    asked = [{"uuid": shared["id"]}, {"uuid": external["id"]}]
    assert requested.networks(neutron.as_caller("p1"), "p1", asked,
                              external_ok=True) == [
        {"uuid": shared["id"]}, {"uuid": external["id"], "caller_sees": True}]
    with pytest.raises(requested.NetworkRequestRefused) as caught:
        requested.networks(neutron.as_caller("p1"), "p1", asked)
    assert caught.value.code == 403


def test_a_port_without_an_address_is_refused() -> None:
    neutron = FakeNeutron()
    port = neutron.add_port(neutron.add_network("p1", cidr=None))
    with pytest.raises(requested.NetworkRequestRefused,
                       match=f"Port {port['id']} requires a FixedIP"):
        requested.networks(neutron.as_caller("p1"), "p1", [{"port": port["id"]}])


def test_an_ipv6_fixed_ip_in_its_subnet_passes() -> None:
    neutron = FakeNeutron()
    net = neutron.add_network("p1", cidr="fd00::/64")
    asked = [{"uuid": net["id"], "fixed_ip": "fd00::20"}]
    assert requested.networks(neutron.as_caller("p1"), "p1", asked) == asked


def test_groups_by_name_or_id_once_each() -> None:
    neutron = FakeNeutron()
    web = neutron.add_group("p1", "web")
    assert requested.security_group_ids(neutron.as_caller("p1"), "p1",
                                        ["web", web["id"]]) == [web["id"]]
    assert requested.security_group_ids(neutron.as_caller("p1"), "p1", []) == []


def test_the_ports_a_request_needs_are_checked_against_the_projects_free_ports() -> None:
    """Nova's validate_networks: how many of the servers asked for the project's free ports
    allow (its ports against Neutron's port quota), a port given by the caller needing
    none; a project over its quota already is refused in Nova's words."""
    neutron = FakeNeutron()
    net, other = neutron.add_network("p1"), neutron.add_network("p1", "other", "10.1.0.0/24")
    neutron.port_quotas["p1"] = 5
    neutron.add_port(net)  # one port of p1's already: 4 free
    caller = neutron.as_caller("p1")
    two = [{"uuid": net["id"]}, {"uuid": other["id"]}]
    assert requested.servers_allowed(caller, "p1", [{"uuid": net["id"]}], 3) == 3
    assert requested.servers_allowed(caller, "p1", [{"uuid": net["id"]}], 10) == 4
    assert requested.servers_allowed(caller, "p1", two, 3) == 2
    calls = len(neutron.calls)
    port = neutron.add_port(net)
    assert requested.servers_allowed(caller, "p1", [{"port": port["id"]}], 1) == 1
    assert requested.servers_allowed(caller, "p1", None, 1) == 1
    assert len(neutron.calls) == calls  # nothing to make: Neutron not asked
    neutron.port_quotas["p1"] = -1
    assert requested.servers_allowed(caller, "p1", two, 1000) == 1000
    neutron.port_quotas["p1"] = 1
    with pytest.raises(requested.PortLimitExceeded) as caught:
        requested.servers_allowed(caller, "p1", two, 1)
    assert str(caught.value) == "The number of defined ports: 2 is over the limit: 1"
    assert caught.value.code == 403

"""A create's networks and security groups: Nova's checks, under each backend.

Under the neutron backend (a fake Neutron that shows each caller what Neutron's policy
shows it), what Neutron would refuse is refused before anything is claimed, with Nova's
status and message, and what passed is in the instance spec for its host to make ports of.
"""

from __future__ import annotations

from typing import Any

import pytest

from tests.unit.api.harness import Harness, spec_of
from tests.unit.fake_neutron import FakeNeutron

P1, P2 = "p1", "p2"


@pytest.fixture
def neutron() -> FakeNeutron:
    return FakeNeutron()


@pytest.fixture
def cloud(neutron: FakeNeutron) -> Harness:
    harness = Harness.new(neutron=neutron)
    harness.add_host()
    harness.add_flavor()
    return harness


def create(harness: Harness, version: str | None = None, **fields: Any):
    body = {"server": {"name": "web", "flavorRef": "1", "imageRef": "file:///dev/null",
                       **fields}}
    return harness.call("POST", "/v2.1/servers", body, version=version)


def refused(answer, status: int, message: str) -> None:
    kind = {400: "badRequest", 403: "forbidden", 404: "itemNotFound",
            409: "conflictingRequest"}[status]
    assert (answer.status_int, answer.json) == (status, {kind: {"code": status,
                                                                "message": message}})


def nothing_claimed(harness: Harness) -> None:
    assert harness.placement.consumers == {}


# --- the attacks: what the caller may not use ---------------------------------------------


def test_another_projects_network_is_not_found(cloud: Harness, neutron: FakeNeutron) -> None:
    theirs = neutron.add_network(P2, "private")
    refused(create(cloud, networks=[{"uuid": theirs["id"]}]), 400,
            f"Network {theirs['id']} could not be found.")
    nothing_claimed(cloud)


def test_another_projects_port_is_not_found(cloud: Harness, neutron: FakeNeutron) -> None:
    port = neutron.add_port(neutron.add_network(P2))
    refused(create(cloud, networks=[{"port": port["id"]}]), 400,
            f"Port id {port['id']} could not be found.")
    nothing_claimed(cloud)


def test_a_port_in_use_is_a_conflict(cloud: Harness, neutron: FakeNeutron) -> None:
    port = neutron.add_port(neutron.add_network(P1), device_id="a-server-of-p1")
    refused(create(cloud, networks=[{"port": port["id"]}]), 409,
            f"Port {port['id']} is still in use.")
    nothing_claimed(cloud)


def test_a_fixed_ip_outside_the_networks_subnets_is_refused(cloud: Harness,
                                                            neutron: FakeNeutron) -> None:
    net = neutron.add_network(P1, cidr="10.0.0.0/24")
    refused(create(cloud, networks=[{"uuid": net["id"], "fixed_ip": "10.9.0.5"}]), 400,
            f"Fixed IP address 10.9.0.5 is not in a subnet of network {net['id']}.")
    nothing_claimed(cloud)


def test_a_fixed_ip_another_port_has_is_refused(cloud: Harness, neutron: FakeNeutron) -> None:
    net = neutron.add_network(P1)
    neutron.add_port(net, device_id="the-other", ip="10.0.0.7")
    refused(create(cloud, networks=[{"uuid": net["id"], "fixed_ip": "10.0.0.7"}]), 400,
            "Fixed IP address 10.0.0.7 is already in use on instance the-other.")


def test_another_projects_security_group_is_not_found(cloud: Harness,
                                                      neutron: FakeNeutron) -> None:
    neutron.add_network(P1)
    theirs = neutron.add_group(P2, "web")
    for name in ("web", theirs["id"]):
        refused(create(cloud, security_groups=[{"name": name}]), 400,
                f"Security group {name} not found.")
    nothing_claimed(cloud)


# --- Nova's other answers -----------------------------------------------------------------


def test_auto_takes_the_one_network_and_several_are_ambiguous(cloud: Harness,
                                                              neutron: FakeNeutron) -> None:
    net = neutron.add_network(P1)
    uuid = create(cloud, version="2.37", networks="auto").json["server"]["id"]
    assert spec_of(cloud, uuid)["networks"] == [{"uuid": net["id"]}]
    neutron.add_network("another", shared=True)
    refused(create(cloud, version="2.37", networks="auto"), 409,
            "Multiple possible networks found, use a Network ID to be more specific.")


def test_auto_without_a_network_cannot_allocate_one_and_absent_boots_without(
        cloud: Harness, neutron: FakeNeutron) -> None:
    neutron.add_network(P2)  # not p1's
    refused(create(cloud, version="2.37", networks="auto"), 400,
            "Unable to automatically allocate a network for project p1")
    uuid = create(cloud).json["server"]["id"]  # 2.1: no networks asked, none there
    assert spec_of(cloud, uuid)["network"] is False and "networks" not in spec_of(cloud, uuid)


def test_none_is_a_server_without_a_network(cloud: Harness, neutron: FakeNeutron) -> None:
    neutron.add_network(P1)
    uuid = create(cloud, version="2.37", networks="none").json["server"]["id"]
    assert spec_of(cloud, uuid)["network"] is False


def test_a_network_without_a_subnet_cannot_boot_on(cloud: Harness,
                                                   neutron: FakeNeutron) -> None:
    net = neutron.add_network(P1, cidr=None)
    refused(create(cloud, networks=[{"uuid": net["id"]}]), 400,
            f"Network {net['id']} requires a subnet in order to boot instances on.")


@pytest.mark.parametrize("networks,message", [
    ([{"port": "{port}"}, {"port": "{port}"}],
     "Port ID '{port}' was specified twice: you cannot attach a port multiple times."),
    ([{"port": "{port}", "fixed_ip": "10.0.0.9"}],
     "Specified Fixed IP '10.0.0.9' cannot be used with port '{port}': the two cannot be "
     "specified together."),
    ([{"fixed_ip": "10.0.0.9"}], "Bad network format: missing 'uuid'"),
    ([{"uuid": "not-a-uuid"}],
     "Bad networks format: network uuid is not in proper format (not-a-uuid)"),
])
def test_novas_format_checks(cloud: Harness, neutron: FakeNeutron, networks, message) -> None:
    port = neutron.add_port(neutron.add_network(P1))["id"]
    asked = [{k: v.replace("{port}", port) for k, v in item.items()} for item in networks]
    refused(create(cloud, networks=asked), 400, message.replace("{port}", port))


def test_several_servers_cannot_share_a_port_or_a_fixed_ip(cloud: Harness,
                                                           neutron: FakeNeutron) -> None:
    net = neutron.add_network(P1)
    port = neutron.add_port(net)
    refused(create(cloud, networks=[{"port": port["id"]}], max_count=2), 400,
            "Failed to launch instances: Unable to launch multiple instances with a single "
            "configured port ID. Please launch your instance one by one with different "
            "ports.")
    refused(create(cloud, networks=[{"uuid": net["id"], "fixed_ip": "10.0.0.9"}],
                   max_count=2), 400,
            "Failed to launch instances: max_count cannot be greater than 1 if an fixed_ip "
            "is specified.")


def test_more_servers_than_the_projects_free_ports_allow_are_refused_or_fewer(
        cloud: Harness, neutron: FakeNeutron) -> None:
    """Nova's port quota check before anything is claimed: fewer free ports than min_count
    servers need is 403; fewer than max_count, as many servers as the ports allow."""
    net = neutron.add_network(P1)
    neutron.port_quotas[P1] = 2
    refused(create(cloud, networks=[{"uuid": net["id"]}], min_count=3), 403,
            "Maximum number of ports exceeded")
    refused(create(cloud, networks=[{"uuid": net["id"]}] * 3), 403,
            "Maximum number of ports exceeded")
    nothing_claimed(cloud)
    answer = create(cloud, networks=[{"uuid": net["id"]}], min_count=1, max_count=5,
                    return_reservation_id=True)
    assert answer.status_int == 202, answer.text
    assert len(cloud.placement.consumers) == 2


def test_a_name_two_groups_have_is_a_conflict(cloud: Harness, neutron: FakeNeutron) -> None:
    neutron.add_network(P1)
    neutron.add_group(P1, "web")
    neutron.add_group(P1, "web")
    refused(create(cloud, security_groups=[{"name": "web"}]), 409,
            "Multiple security groups found matching 'web'. Use an ID to be more specific.")


def test_what_passed_is_in_the_spec(cloud: Harness, neutron: FakeNeutron) -> None:
    net, shared = neutron.add_network(P1), neutron.add_network("ops", "public", shared=True)
    port = neutron.add_port(net)
    web, default = neutron.add_group(P1, "web"), neutron.add_group(P1, "default")
    answer = create(cloud, networks=[{"uuid": net["id"], "fixed_ip": "10.0.0.20"},
                                     {"port": port["id"]}, {"uuid": shared["id"]}],
                    security_groups=[{"name": "web"}, {"name": default["id"]}])
    assert answer.status_int == 202, answer.text
    spec = spec_of(cloud, answer.json["server"]["id"])
    assert spec["networks"] == [{"uuid": net["id"], "fixed_ip": "10.0.0.20"},
                                {"port": port["id"]}, {"uuid": shared["id"]}]
    assert spec["security_groups"] == [web["id"], default["id"]]
    assert "network" not in spec


def test_default_alone_is_neutrons_default(cloud: Harness, neutron: FakeNeutron) -> None:
    neutron.add_network(P1)
    uuid = create(cloud, security_groups=[{"name": "default"}]).json["server"]["id"]
    assert "security_groups" not in spec_of(cloud, uuid)


def test_a_device_tag_is_refused_not_ignored(cloud: Harness, neutron: FakeNeutron) -> None:
    net = neutron.add_network(P1)
    refused(create(cloud, version="2.37", networks=[{"uuid": net["id"], "tag": "nic1"}]),
            400, "Device tags are not supported")


# --- the libvirt backend -------------------------------------------------------------------


def test_under_libvirt_a_network_port_or_fixed_ip_is_refused_in_one_line(
        harness: Harness) -> None:
    from etcd_compute.api.handlers.networks import network_id

    ours = network_id("etcd-compute")
    for networks in ([{"uuid": "6f1c0f6e-3b0a-4c1e-9d1e-2f8f3c6a9a02"}],
                     [{"port": "6f1c0f6e-3b0a-4c1e-9d1e-2f8f3c6a9a02"}],
                     [{"uuid": ours, "fixed_ip": "192.168.123.9"}]):
        answer = create(harness, networks=networks)
        assert answer.status_int == 400
        message = answer.json["badRequest"]["message"]
        assert "needs network.backend neutron" in message and "\n" not in message
    assert create(harness, networks=[{"uuid": ours}]).status_int == 202
    assert create(harness, version="2.37", networks="none").status_int == 202
    refused(create(harness, security_groups=[{"name": "web"}]), 400,
            "Security group web not found.")


def test_an_external_network_not_shared_is_the_admins(cloud: Harness,
                                                      neutron: FakeNeutron) -> None:
    external = neutron.add_network("ops", "public", external=True, cidr="203.0.113.0/24")
    port = neutron.add_port(external, project="p1")
    message = f"It is not allowed to create an interface on external network {external['id']}"
    refused(create(cloud, networks=[{"uuid": external["id"]}]), 403, message)
    refused(create(cloud, networks=[{"port": port["id"]}]), 403, message)
    nothing_claimed(cloud)
    answer = cloud.admin("POST", "/v2.1/servers", {"server": {
        "name": "edge", "flavorRef": "1", "imageRef": "file:///dev/null",
        "networks": [{"uuid": external["id"]}]}})
    assert answer.status_int == 202, answer.text
    shared = neutron.add_network("ops", "shared-public", external=True, shared=True)
    assert create(cloud, networks=[{"uuid": shared["id"]}]).status_int == 202


def test_a_scoped_fixed_ip_is_refused_and_ids_and_ips_reach_the_spec_canonical(
        cloud: Harness, neutron: FakeNeutron) -> None:
    net = neutron.add_network("p1", cidr="fe80::/64")
    refused(create(cloud, networks=[{"uuid": net["id"], "fixed_ip": "fe80::5%eth0"}]),
            400, "fe80::5%eth0 is not a valid IP v4/6 address.")
    nothing_claimed(cloud)
    answer = create(cloud, networks=[{"uuid": net["id"].upper().replace("-", ""),
                                      "fixed_ip": "FE80:0::6"}])
    assert answer.status_int == 202, answer.text
    assert spec_of(cloud, answer.json["server"]["id"])["networks"] == [
        {"uuid": net["id"], "fixed_ip": "fe80::6"}]


def test_more_nics_or_groups_than_a_spec_carries_are_refused_before_neutron(
        cloud: Harness, neutron: FakeNeutron) -> None:
    net = neutron.add_network("p1")
    neutron.calls.clear()
    refused(create(cloud, networks=[{"uuid": net["id"]}] * 17), 400,
            "At most 16 networks or ports per server here")
    refused(create(cloud, security_groups=[{"name": f"g{i}"} for i in range(17)]), 400,
            "At most 16 security groups per server here")
    assert neutron.calls == []

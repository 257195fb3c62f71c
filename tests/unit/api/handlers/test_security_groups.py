"""addSecurityGroup, removeSecurityGroup over the one group there is, `default`: Nova's
checks and messages, hostile bodies refused with nothing written, the membership shown at
once and kept by the instance (spec and record) once its host has swapped the filter."""

from __future__ import annotations

import pytest

from tests.unit.api.harness import Harness, active, spec_of
from tests.unit.fake_neutron import FakeNeutron


@pytest.mark.parametrize("body", [
    {"removeSecurityGroup": None}, {"removeSecurityGroup": "default"},
    {"removeSecurityGroup": {}}, {"removeSecurityGroup": {"name": 7}},
    {"removeSecurityGroup": {"name": {"name": "default"}}},
    {"removeSecurityGroup": {"name": ["default"]}}, {"removeSecurityGroup": {"name": ""}},
    {"removeSecurityGroup": {"name": "   "}},
    {"removeSecurityGroup": {"name": "default", "id": "x"}},
    {"removeSecurityGroup": {"name": "default"}, "addSecurityGroup": {"name": "default"}},
])
def test_a_hostile_body_is_400_and_writes_nothing(harness: Harness, body):
    uuid = active(harness)
    before = harness.store.revision
    answer = harness.action(uuid, body)
    assert answer.status_int == 400, answer.text
    assert harness.store.revision == before
    assert harness.show(uuid)["security_groups"] == [{"name": "default"}]


def test_a_long_or_unknown_name_is_novas_404_naming_it_bounded(harness: Harness):
    uuid = active(harness)
    before = harness.store.revision
    for action in ("addSecurityGroup", "removeSecurityGroup"):
        answer = harness.action(uuid, {action: {"name": "web"}})
        assert answer.status_int == 404
        assert answer.json["itemNotFound"]["message"] == \
            "Security group web is not found for project p1"
        answer = harness.action(uuid, {action: {"name": "x" * 100000}})
        assert answer.status_int == 404 and len(answer.json["itemNotFound"]["message"]) < 300
    assert harness.store.revision == before


def test_who_may_ask_another_projects_server_and_a_reader(harness: Harness):
    uuid = active(harness)
    before = harness.store.revision
    body = {"removeSecurityGroup": {"name": "default"}}
    assert harness.action(uuid, body, project="p2").status_int == 404
    assert harness.action(uuid, body, roles=("reader",)).status_int == 403
    assert harness.store.revision == before


def test_remove_then_add_default_shown_at_once_and_kept_by_the_instance(harness: Harness):
    uuid = active(harness)
    assert harness.show(uuid)["security_groups"] == [{"name": "default"}]
    answer = harness.action(uuid, {"removeSecurityGroup": {"name": "default"}})
    assert answer.status_int == 202 and answer.body == b""
    shown = harness.show(uuid)
    assert "security_groups" not in shown  # Nova leaves the key out for none
    assert (shown["status"], shown["OS-EXT-STS:task_state"]) == ("ACTIVE", None)
    assert spec_of(harness, uuid)["action"] == "security-groups"
    assert spec_of(harness, uuid)["request"]["security_groups"] == []
    record = harness.host_does(uuid)
    assert record["state"] == "ACTIVE" and record["security_groups"] == []
    assert spec_of(harness, uuid)["security_groups"] == []
    assert "security_groups" not in harness.show(uuid)
    listed = harness.call("GET", "/v2.1/servers/detail").json["servers"]
    assert "security_groups" not in listed[0]
    # Not in it: Nova's 404 naming the instance.
    answer = harness.action(uuid, {"removeSecurityGroup": {"name": "default"}})
    assert answer.status_int == 404
    assert answer.json["itemNotFound"]["message"] == \
        f"Security group default not associated with the instance {uuid}"
    assert harness.action(uuid, {"addSecurityGroup": {"name": "default"}}).status_int == 202
    assert harness.show(uuid)["security_groups"] == [{"name": "default"}]
    harness.host_does(uuid)
    assert spec_of(harness, uuid)["security_groups"] == ["default"]
    # In it already: nothing to do, nothing written (Neutron keeps a port's groups a set).
    before = harness.store.revision
    assert harness.action(uuid, {"addSecurityGroup": {"name": "default"}}).status_int == 202
    assert harness.store.revision == before


def test_a_failed_swap_shows_the_groups_the_guest_still_has(harness: Harness):
    uuid = active(harness)
    harness.action(uuid, {"removeSecurityGroup": {"name": "default"}})
    record = harness.host_does(uuid, error="security-groups: libvirt said no")
    assert record["security_groups"] == ["default"]
    assert harness.show(uuid)["security_groups"] == [{"name": "default"}]
    assert "security_groups" not in spec_of(harness, uuid)


def test_a_locked_server_is_changed_as_nova_does_not_check_the_lock(harness: Harness):
    uuid = active(harness)
    assert harness.action(uuid, {"lock": None}).status_int == 202
    assert harness.action(uuid, {"removeSecurityGroup": {"name": "default"}}).status_int == 202


def test_a_server_not_active_or_stopped_is_409_and_writes_nothing(harness: Harness):
    uuid = harness.boot()  # still SCHEDULED
    before = harness.store.revision
    answer = harness.action(uuid, {"removeSecurityGroup": {"name": "default"}})
    assert answer.status_int == 409, answer.text
    assert harness.store.revision == before
    active_one = active(harness, name="db")
    harness.action(active_one, {"os-stop": None})  # pending: one request at a time
    answer = harness.action(active_one, {"removeSecurityGroup": {"name": "default"}})
    assert answer.status_int == 409 and "pending" in answer.json["conflictingRequest"]["message"]


def test_a_server_without_a_network_has_no_group_nor_port(harness: Harness):
    uuid = harness.boot(networks="none", version="2.37")
    harness.activate(uuid)
    assert "security_groups" not in harness.show(uuid)
    for action in ("addSecurityGroup", "removeSecurityGroup"):
        answer = harness.action(uuid, {action: {"name": "default"}})
        assert answer.status_int == 404
        assert answer.json["itemNotFound"]["message"] == \
            f"instance_id {uuid} could not be found as device id on any ports"


# --- the neutron backend: Neutron's groups on the server's ports --------------------------


@pytest.fixture
def neutron() -> FakeNeutron:
    return FakeNeutron()


@pytest.fixture
def cloud(neutron: FakeNeutron) -> Harness:
    harness = Harness.new(neutron=neutron)
    harness.add_host()
    harness.add_flavor()
    return harness


def server_with_port(cloud: Harness, neutron: FakeNeutron, *groups: str,
                     ports: int = 1) -> tuple[str, list[dict]]:
    """p1's server and its ports in `groups` (the host's part, making the ports, stood in
    for by the fake)."""
    net = neutron.add_network("p1", "private")
    uuid = active(cloud, networks=[{"uuid": net["id"]}])
    return uuid, [neutron.add_port(net, device_id=uuid, security_groups=list(groups))
                  for _ in range(ports)]


def port_groups(neutron: FakeNeutron, port: dict) -> list[str]:
    return neutron.items["ports"][port["id"]]["security_groups"]


def test_the_servers_groups_in_novas_proxy_view(cloud: Harness, neutron: FakeNeutron):
    web = neutron.add_group("p1", "web", rules=[
        {"protocol": "tcp", "port_range_min": 22, "port_range_max": 22,
         "remote_ip_prefix": "192.0.2.0/24"},
        {"protocol": "icmp"}, {"direction": "egress", "protocol": "tcp"}])
    default = neutron.add_group("p1", "default")
    neutron.items["security_groups"][default["id"]]["security_group_rules"].append({
        "id": "r-remote", "security_group_id": default["id"], "direction": "ingress",
        "ethertype": "IPv4", "protocol": None, "port_range_min": None,
        "port_range_max": None, "remote_group_id": web["id"], "remote_ip_prefix": None})
    uuid, _ = server_with_port(cloud, neutron, web["id"], default["id"])
    answer = cloud.call("GET", f"/v2.1/servers/{uuid}/os-security-groups", roles=("reader",))
    assert answer.status_int == 200, answer.text
    shown = answer.json["security_groups"]
    assert [g["name"] for g in shown] == ["default", "web"]
    assert shown[0]["rules"] == [{
        "id": "r-remote", "parent_group_id": default["id"], "ip_protocol": None,
        "from_port": None, "to_port": None, "group": {"name": "web", "tenant_id": "p1"},
        "ip_range": {}}]
    ssh, icmp = shown[1]["rules"]
    assert (ssh["ip_protocol"], ssh["from_port"], ssh["to_port"], ssh["ip_range"]) == \
        ("tcp", 22, 22, {"cidr": "192.0.2.0/24"})
    assert (icmp["from_port"], icmp["to_port"], icmp["ip_range"]) == \
        (-1, -1, {"cidr": "0.0.0.0/0"})
    assert {k: shown[1][k] for k in ("id", "description", "tenant_id")} == {
        "id": web["id"], "description": "web group", "tenant_id": "p1"}
    assert cloud.show(uuid)["security_groups"] == [{"name": "web"}, {"name": "default"}]


def test_another_projects_member_does_not_find_the_server(cloud: Harness,
                                                          neutron: FakeNeutron):
    uuid, _ = server_with_port(cloud, neutron)
    answer = cloud.call("GET", f"/v2.1/servers/{uuid}/os-security-groups", project="p2")
    assert answer.status_int == 404


def test_add_and_remove_change_every_port(cloud: Harness, neutron: FakeNeutron):
    default, web = neutron.add_group("p1", "default"), neutron.add_group("p1", "web")
    uuid, ports = server_with_port(cloud, neutron, default["id"], ports=2)
    assert cloud.action(uuid, {"addSecurityGroup": {"name": "web"}}).status_int == 202
    assert all(port_groups(neutron, p) == [default["id"], web["id"]] for p in ports)
    assert cloud.action(uuid, {"addSecurityGroup": {"name": web["id"]}}).status_int == 202
    assert all(port_groups(neutron, p) == [default["id"], web["id"]] for p in ports)
    assert cloud.action(uuid, {"removeSecurityGroup": {"name": "default"}}).status_int == 202
    assert all(port_groups(neutron, p) == [web["id"]] for p in ports)
    answer = cloud.action(uuid, {"removeSecurityGroup": {"name": "default"}})
    assert (answer.status_int, answer.json["itemNotFound"]["message"]) == (
        404, f"Security group default not associated with the instance {uuid}")


def test_novas_refusals_of_a_group_change(cloud: Harness, neutron: FakeNeutron):
    uuid, ports = server_with_port(cloud, neutron)
    theirs = neutron.add_group("p2", "theirs")
    for name in ("theirs", theirs["id"], "x" * 100000):
        answer = cloud.action(uuid, {"addSecurityGroup": {"name": name}})
        assert (answer.status_int, answer.json["itemNotFound"]["message"]) == (
            404, f"Security group {name[:255]} is not found for project p1")
    neutron.add_group("p1", "twin")
    neutron.add_group("p1", "twin")
    answer = cloud.action(uuid, {"addSecurityGroup": {"name": "twin"}})
    assert answer.status_int == 409
    neutron.add_group("p1", "web")
    neutron.items["ports"][ports[0]["id"]]["port_security_enabled"] = False
    answer = cloud.action(uuid, {"addSecurityGroup": {"name": "web"}})
    assert (answer.status_int, answer.json["badRequest"]["message"]) == (
        400, "Network requires port_security_enabled and subnet associated in order to "
             "apply security groups.")
    portless = active(cloud, networks=[{"uuid": ports[0]["network_id"]}])
    answer = cloud.action(portless, {"addSecurityGroup": {"name": "web"}})
    assert (answer.status_int, answer.json["itemNotFound"]["message"]) == (
        404, f"instance_id {portless} could not be found as device id on any ports")
    assert port_groups(neutron, ports[0]) == []


def test_under_libvirt_the_list_is_not_served(harness: Harness):
    uuid = active(harness)
    answer = harness.call("GET", f"/v2.1/servers/{uuid}/os-security-groups",
                          roles=("observer",))
    assert (answer.status_int, answer.json["itemNotFound"]["message"]) == (
        404, "The resource could not be found.")

"""os-interface under the neutron backend: a server's ports in Nova's view; attach and
detach checked as Nova checks them, then refused (the compute cannot hot-plug yet)."""

from __future__ import annotations

import pytest

from tests.unit.api.harness import Harness, active
from tests.unit.fake_neutron import FakeNeutron


@pytest.fixture
def neutron() -> FakeNeutron:
    return FakeNeutron()


@pytest.fixture
def cloud(neutron: FakeNeutron) -> Harness:
    harness = Harness.new(neutron=neutron)
    harness.add_host()
    harness.add_flavor()
    return harness


def server_and_port(cloud: Harness, neutron: FakeNeutron) -> tuple[str, dict]:
    net = neutron.add_network("p1")
    uuid = active(cloud)
    # The compute's part (making the port) stood in for by the fake.
    return uuid, neutron.add_port(net, device_id=uuid)


def test_a_servers_interfaces_are_its_ports(cloud: Harness, neutron: FakeNeutron):
    uuid, port = server_and_port(cloud, neutron)
    neutron.add_port(neutron.add_network("p1", "other"), device_id="another-server")
    listed = cloud.call("GET", f"/v2.1/servers/{uuid}/os-interface", roles=("reader",))
    expected = {"net_id": port["network_id"], "port_id": port["id"],
                "mac_addr": port["mac_address"], "port_state": "ACTIVE",
                "fixed_ips": port["fixed_ips"]}
    assert listed.json == {"interfaceAttachments": [expected]}
    shown = cloud.call("GET", f"/v2.1/servers/{uuid}/os-interface/{port['id']}",
                       version="2.70")
    assert shown.json == {"interfaceAttachment": {**expected, "tag": None}}


def test_a_port_not_the_servers_is_not_found(cloud: Harness, neutron: FakeNeutron):
    uuid, _ = server_and_port(cloud, neutron)
    other = neutron.add_port(neutron.add_network("p1"), device_id="another-server")
    theirs = neutron.add_port(neutron.add_network("p2"), device_id=uuid)
    answer = cloud.call("GET", f"/v2.1/servers/{uuid}/os-interface/{other['id']}")
    assert answer.json["itemNotFound"]["message"] == \
        f"Instance {uuid} does not have a port with id {other['id']}"
    answer = cloud.call("GET", f"/v2.1/servers/{uuid}/os-interface/{theirs['id']}")
    assert answer.json["itemNotFound"]["message"] == \
        f"Port id {theirs['id']} could not be found."
    assert cloud.call("GET", f"/v2.1/servers/{uuid}/os-interface",
                      project="p2").status_int == 404


@pytest.mark.parametrize("body,message", [
    ({"interfaceAttachment": {"net_id": "6f1c0f6e-3b0a-4c1e-9d1e-2f8f3c6a9a02",
                              "port_id": "6f1c0f6e-3b0a-4c1e-9d1e-2f8f3c6a9a03"}},
     "Must not input both network_id and port_id"),
    ({"interfaceAttachment": {"fixed_ips": [{"ip_address": "10.0.0.9"}]}},
     "Must input network_id when request IP address"),
    ({"interfaceAttachment": {}}, "Attaching interfaces is not supported for instance {}."),
])
def test_an_attach_is_checked_then_refused_truthfully(cloud: Harness, neutron: FakeNeutron,
                                                       body, message):
    uuid, _ = server_and_port(cloud, neutron)
    before = neutron.calls[:]
    answer = cloud.call("POST", f"/v2.1/servers/{uuid}/os-interface", body)
    assert (answer.status_int, answer.json["badRequest"]["message"]) == (
        400, message.replace("{}", uuid))
    assert not [c for c in neutron.calls[len(before):] if c[0] != "GET"]


@pytest.mark.parametrize("body", [
    {"interfaceAttachment": {"net_id": "x"}}, {"interfaceAttachment": {"port": "y"}},
    {"interfaceAttachment": {"fixed_ips": [{"ip_address": "10.0.0.1"}] * 2}},
    {"interfaceAttachment": {"tag": "nic"}}, {"other": {}}, [],
])
def test_a_hostile_body_is_400(cloud: Harness, neutron: FakeNeutron, body):
    uuid, _ = server_and_port(cloud, neutron)
    answer = cloud.call("POST", f"/v2.1/servers/{uuid}/os-interface", body)
    assert answer.status_int == 400 and "not supported" not in answer.text, answer.text


def test_a_detach_is_checked_then_refused_truthfully(cloud: Harness, neutron: FakeNeutron):
    uuid, port = server_and_port(cloud, neutron)
    path = f"/v2.1/servers/{uuid}/os-interface"
    gone = "6f1c0f6e-3b0a-4c1e-9d1e-2f8f3c6a9a02"
    answer = cloud.call("DELETE", f"{path}/{gone}")
    assert (answer.status_int, answer.json["itemNotFound"]["message"]) == (
        404, f"Port {gone} is not attached")
    answer = cloud.call("DELETE", f"{path}/{port['id']}")
    assert (answer.status_int, answer.json["badRequest"]["message"]) == (
        400, f"Detaching interfaces is not supported for instance {uuid}.")
    assert cloud.admin("POST", f"/v2.1/servers/{uuid}/action", {"lock": None}).status_int \
        == 202
    assert cloud.call("DELETE", f"{path}/{port['id']}").status_int == 409


def test_under_libvirt_os_interface_is_not_served(harness: Harness):
    uuid = active(harness)
    for method, body in (("GET", None), ("POST", {"interfaceAttachment": {}}),
                         ("POST", {"not": "a body of os-interface"})):
        answer = harness.call(method, f"/v2.1/servers/{uuid}/os-interface", body,
                              roles=("observer",))
        assert (answer.status_int, answer.json["itemNotFound"]["message"]) == (
            404, "The resource could not be found."), answer.text

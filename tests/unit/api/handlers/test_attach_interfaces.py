"""os-interface under the neutron backend: a server's ports in Nova's view; attach and
detach checked as Nova checks them, then asked of the server's host (the record's task),
an attach answered once the host has plugged the port."""

from __future__ import annotations

import threading
import time
from typing import Any

import pytest

from etcd_compute import messages
from etcd_compute.instances import records
from tests.unit.api.harness import Harness, active
from tests.unit.fake_neutron import FakeNeutron


@pytest.fixture
def neutron() -> FakeNeutron:
    return FakeNeutron()


@pytest.fixture(autouse=True)
def _short_wait(monkeypatch: pytest.MonkeyPatch) -> None:
    from etcd_compute.api.handlers import attach_interfaces
    monkeypatch.setattr(attach_interfaces, "ATTACH_SECONDS", 5.0)


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
    ({"interfaceAttachment": {}}, "Must input network_id or port_id"),
])
def test_a_bad_attach_is_400_and_asks_nothing(cloud: Harness, neutron: FakeNeutron,
                                              body, message):
    uuid, _ = server_and_port(cloud, neutron)
    before = neutron.calls[:]
    answer = cloud.call("POST", f"/v2.1/servers/{uuid}/os-interface", body)
    assert (answer.status_int, answer.json["badRequest"]["message"]) == (400, message)
    assert not [c for c in neutron.calls[len(before):] if c[0] != "GET"]
    assert spec_action(cloud, uuid) == "build"


def spec_action(cloud: Harness, uuid: str) -> tuple[str, dict[str, Any]] | str:
    host = records.locate(cloud.store, uuid)["host"]
    spec = messages.decode(messages.INSTANCE_SPEC,
                           cloud.store.get(cloud.store.keys.spec(host, uuid)).value)
    return spec["action"] if spec["action"] == "build" else (spec["action"], spec["request"])


def host_plugs(cloud: Harness, neutron: FakeNeutron, uuid: str, error: str | None = None
               ) -> threading.Thread:
    """The server's host, in a thread: once the attach is asked, the port made (or bound)
    as the compute makes it, and the action ended."""
    def run() -> None:
        for _ in range(200):
            asked = spec_action(cloud, uuid)
            if asked != "build":
                break
            time.sleep(0.02)
        action, request = asked
        assert action == "attach-interface"
        nic = request["nic"]
        if error is None and "port" in nic:
            neutron.items["ports"][nic["port"]]["device_id"] = uuid
        elif error is None:
            neutron.add_port(neutron.items["networks"][nic["uuid"]], device_id=uuid)
        cloud.host_does(uuid, error)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread


def test_an_attach_on_a_network_is_the_hosts_and_answers_its_port(cloud: Harness,
                                                                  neutron: FakeNeutron):
    uuid, port = server_and_port(cloud, neutron)
    net = neutron.add_network("p1", "second")
    host = host_plugs(cloud, neutron, uuid)
    answer = cloud.call("POST", f"/v2.1/servers/{uuid}/os-interface",
                        {"interfaceAttachment": {"net_id": net["id"]}}, version="2.70")
    host.join(5)
    assert answer.status_int == 200, answer.text
    shown = answer.json["interfaceAttachment"]
    assert shown["net_id"] == net["id"] and shown["port_id"] != port["id"]
    assert shown["tag"] is None
    listed = cloud.call("GET", f"/v2.1/servers/{uuid}/os-interface").json
    assert len(listed["interfaceAttachments"]) == 2
    actions = cloud.call("GET", f"/v2.1/servers/{uuid}/os-instance-actions").json
    assert actions["instanceActions"][0]["action"] == "attach_interface"


def test_an_attach_of_the_users_port_names_it_to_the_host(cloud: Harness,
                                                          neutron: FakeNeutron):
    uuid, _ = server_and_port(cloud, neutron)
    free = neutron.add_port(neutron.add_network("p1", "second"), device_id="")
    host = host_plugs(cloud, neutron, uuid)
    answer = cloud.call("POST", f"/v2.1/servers/{uuid}/os-interface",
                        {"interfaceAttachment": {"port_id": free["id"]}})
    host.join(5)
    assert answer.status_int == 200 and "tag" not in answer.json["interfaceAttachment"]
    assert answer.json["interfaceAttachment"]["port_id"] == free["id"]


def test_a_failed_plug_is_500_with_the_hosts_reason(cloud: Harness, neutron: FakeNeutron):
    uuid, _ = server_and_port(cloud, neutron)
    net = neutron.add_network("p1", "second")
    host = host_plugs(cloud, neutron, uuid, error="attach-interface: no PCI slot left")
    answer = cloud.call("POST", f"/v2.1/servers/{uuid}/os-interface",
                        {"interfaceAttachment": {"net_id": net["id"]}})
    host.join(5)
    assert answer.status_int == 500
    assert "no PCI slot left" in answer.json["computeFault"]["message"]
    assert cloud.show(uuid)["status"] == "ACTIVE"


@pytest.mark.parametrize("whose,code", [("another project's", 404), ("in use", 409),
                                        ("unknown", 404)])
def test_an_attach_of_a_port_not_the_callers_to_take_asks_nothing(
        cloud: Harness, neutron: FakeNeutron, whose, code):
    uuid, _ = server_and_port(cloud, neutron)
    port_id = {"another project's": lambda: neutron.add_port(
                   neutron.add_network("p2"), project="p2", device_id="")["id"],
               "in use": lambda: neutron.add_port(neutron.add_network("p1", "x"),
                                                  device_id="another-server")["id"],
               "unknown": lambda: "6f1c0f6e-3b0a-4c1e-9d1e-2f8f3c6a9a02"}[whose]()
    answer = cloud.call("POST", f"/v2.1/servers/{uuid}/os-interface",
                        {"interfaceAttachment": {"port_id": port_id}})
    assert answer.status_int == code, answer.text
    assert spec_action(cloud, uuid) == "build"


def test_an_attach_to_a_locked_or_busy_server_is_409(cloud: Harness, neutron: FakeNeutron):
    uuid, _ = server_and_port(cloud, neutron)
    net = neutron.add_network("p1", "second")
    body = {"interfaceAttachment": {"net_id": net["id"]}}
    assert cloud.action(uuid, {"os-stop": None}).status_int == 202
    assert cloud.call("POST", f"/v2.1/servers/{uuid}/os-interface", body).status_int == 409
    cloud.host_does(uuid)
    assert cloud.admin("POST", f"/v2.1/servers/{uuid}/action", {"lock": None}).status_int \
        == 202
    assert cloud.call("POST", f"/v2.1/servers/{uuid}/os-interface", body).status_int == 409


@pytest.mark.parametrize("body", [
    {"interfaceAttachment": {"net_id": "x"}}, {"interfaceAttachment": {"port": "y"}},
    {"interfaceAttachment": {"fixed_ips": [{"ip_address": "10.0.0.1"}] * 2}},
    {"interfaceAttachment": {"tag": "nic"}}, {"other": {}}, [],
])
def test_a_hostile_body_is_400(cloud: Harness, neutron: FakeNeutron, body):
    uuid, _ = server_and_port(cloud, neutron)
    answer = cloud.call("POST", f"/v2.1/servers/{uuid}/os-interface", body)
    assert answer.status_int == 400 and "not supported" not in answer.text, answer.text


def test_a_detach_is_checked_then_asked_of_the_host(cloud: Harness, neutron: FakeNeutron):
    uuid, port = server_and_port(cloud, neutron)
    path = f"/v2.1/servers/{uuid}/os-interface"
    gone = "6f1c0f6e-3b0a-4c1e-9d1e-2f8f3c6a9a02"
    answer = cloud.call("DELETE", f"{path}/{gone}")
    assert (answer.status_int, answer.json["itemNotFound"]["message"]) == (
        404, f"Port {gone} is not attached")
    assert spec_action(cloud, uuid) == "build"
    assert cloud.call("DELETE", f"{path}/{port['id']}").status_int == 202
    action, request = spec_action(cloud, uuid)
    assert (action, request["nic"]) == ("detach-interface", {"port": port["id"]})
    assert cloud.call("DELETE", f"{path}/{port['id']}").status_int == 409  # pending
    cloud.host_does(uuid)
    actions = cloud.call("GET", f"/v2.1/servers/{uuid}/os-instance-actions").json
    assert actions["instanceActions"][0]["action"] == "detach_interface"
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


@pytest.mark.parametrize("address,code,message", [
    ("10.9.0.5", 400, "is not in a subnet of network"),
    ("10.0.0.2", 400, "is already in use"),
    ("fe80::1%eth0", 400, ""),
])
def test_an_attach_with_a_fixed_ip_not_to_be_had_asks_nothing(
        cloud: Harness, neutron: FakeNeutron, address, code, message):
    uuid, port = server_and_port(cloud, neutron)
    net = neutron.items["networks"][port["network_id"]]
    if address == "10.0.0.2":
        neutron.add_port(net, device_id="another-server", ip=address)
    answer = cloud.call("POST", f"/v2.1/servers/{uuid}/os-interface", {"interfaceAttachment": {
        "net_id": net["id"], "fixed_ips": [{"ip_address": address}]}})
    assert answer.status_int == code, answer.text
    assert message in answer.text
    assert spec_action(cloud, uuid) == "build"


def test_an_attach_to_an_external_network_is_an_admins(cloud: Harness, neutron: FakeNeutron):
    uuid, _ = server_and_port(cloud, neutron)
    outside = neutron.add_network("p1", "public", external=True)
    answer = cloud.call("POST", f"/v2.1/servers/{uuid}/os-interface",
                        {"interfaceAttachment": {"net_id": outside["id"]}})
    assert answer.status_int == 403, answer.text
    assert "external network" in answer.text
    assert spec_action(cloud, uuid) == "build"

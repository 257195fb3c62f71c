"""A server's groups on its ports, read and changed as Nova's security_group_api does."""

from __future__ import annotations

import pytest

from etcd_compute.api.objects import server_security_groups as groups
from etcd_compute.api.objects.server_ports import ServerPorts
from etcd_compute.errors import NeutronError
from tests.unit.fake_neutron import FakeNeutron


def test_names_of_a_page_are_one_request_and_hide_what_the_caller_does_not_see() -> None:
    neutron = FakeNeutron()
    net = neutron.add_network("p1")
    web, theirs = neutron.add_group("p1", "web"), neutron.add_group("p2", "theirs")
    nameless = neutron.add_group("p1", "")
    neutron.add_port(net, device_id="a", security_groups=[web["id"], theirs["id"]])
    neutron.add_port(net, device_id="b", security_groups=[nameless["id"]])
    caller = neutron.as_caller("p1")
    ports = ServerPorts.of(caller, ["a", "b"])
    neutron.calls.clear()
    assert groups.names(caller, ports) == {"a": ["web"], "b": [nameless["id"]]}
    assert [c[1] for c in neutron.calls] == ["security_groups"]


def test_a_name_that_is_not_a_uuid_is_never_asked_for_by_id() -> None:
    neutron = FakeNeutron()
    neutron.add_group("p1", "web")
    with pytest.raises(groups.GroupRefused):
        groups.add(neutron.as_caller("p1"), "p1", "server", "web")  # no port
    assert all("id" not in c[2] for c in neutron.calls if c[1] == "security_groups")


def test_neutrons_refusal_of_a_port_update_is_novas_answer() -> None:
    neutron = FakeNeutron()
    port = neutron.add_port(neutron.add_network("p1"), device_id="s")
    group = neutron.add_group("p1", "web")

    class Refusing:
        def __init__(self, status: int):
            self.status, self.caller = status, neutron.as_caller("p1")

        def __getattr__(self, name: str):
            return getattr(self.caller, name)

        def update_port(self, port_id: str, changes: dict) -> dict:
            raise NeutronError("refused", self.status)

    for status, code in ((400, 400), (409, 409)):
        with pytest.raises(groups.GroupRefused) as caught:
            groups.add(Refusing(status), "p1", "s", group["id"])
        assert caught.value.code == code
    with pytest.raises(NeutronError):
        groups.add(Refusing(403), "p1", "s", group["id"])
    assert neutron.items["ports"][port["id"]]["security_groups"] == []

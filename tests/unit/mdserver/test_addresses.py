"""mdserver/addresses.py: public-ipv4 is the floating IP on the instance's port that holds
the address the guest asks from, asked of Neutron (a fake) and kept CACHE_SECONDS; none,
no credential or Neutron down is ""; a header is an address only when it is one IPv4."""

from __future__ import annotations

from typing import Any

import pytest

from etcd_compute.errors import NeutronUnavailable
from etcd_compute.mdserver.addresses import CACHE_SECONDS, PublicAddresses, ipv4_or_empty

UUID = "0b7e4f1e-9a0c-4a51-8f0e-5d2c3b4a6e7f"


class Neutron:
    def __init__(self) -> None:
        self.asked: list[str] = []
        self.down = False
        self.ports_ = [{"id": "p1", "device_id": UUID, "fixed_ips": [{"ip_address": "10.0.0.5"}]},
                       {"id": "p2", "device_id": UUID, "fixed_ips": [{"ip_address": "10.1.0.7"}]}]
        self.floating = [{"port_id": "p2", "floating_ip_address": "172.24.4.9"},
                         {"port_id": "p1", "floating_ip_address": "172.24.4.3"}]

    def ports(self, **filters: Any) -> list[dict[str, Any]]:
        self.asked.append("ports")
        if self.down:
            raise NeutronUnavailable("Neutron: connection refused")
        return [p for p in self.ports_ if p["device_id"] == filters["device_id"]]

    def floating_ips(self, **filters: Any) -> list[dict[str, Any]]:
        self.asked.append("floatingips")
        return [f for f in self.floating if f["port_id"] in filters["port_id"]]


def test_the_floating_ip_of_the_port_holding_the_address():
    neutron = Neutron()
    addresses = PublicAddresses(lambda: neutron)
    assert addresses.public_ipv4(UUID, "10.0.0.5") == "172.24.4.3"
    assert addresses.public_ipv4(UUID, "10.1.0.7") == "172.24.4.9"
    assert addresses.public_ipv4(UUID, "10.9.9.9") == ""  # no port of it holds that
    assert addresses.public_ipv4("another", "10.0.0.5") == ""


def test_a_guest_asking_in_a_loop_is_one_question_per_cache_period():
    neutron, clock = Neutron(), [100.0]
    addresses = PublicAddresses(lambda: neutron, now=lambda: clock[0])
    for _ in range(50):
        assert addresses.public_ipv4(UUID, "10.0.0.5") == "172.24.4.3"
    assert neutron.asked == ["ports", "floatingips"]
    neutron.floating = []  # disassociated
    clock[0] += CACHE_SECONDS
    assert addresses.public_ipv4(UUID, "10.0.0.5") == ""


def test_neutron_down_is_empty_and_not_kept():
    neutron = Neutron()
    neutron.down = True
    addresses = PublicAddresses(lambda: neutron)
    assert addresses.public_ipv4(UUID, "10.0.0.5") == ""
    neutron.down = False
    assert addresses.public_ipv4(UUID, "10.0.0.5") == "172.24.4.3"


def test_without_a_credential_nothing_is_asked():
    assert PublicAddresses(None).public_ipv4(UUID, "10.0.0.5") == ""


@pytest.mark.parametrize(("text", "address"), [
    ("10.0.0.5", "10.0.0.5"), (" 10.0.0.5 ", "10.0.0.5"), ("10.0.0.5, 1.2.3.4", ""),
    ("fe80::1", ""), ("", ""), ("10.0.0.256", ""), ("010.0.0.5", "")])
def test_an_address_is_one_ipv4_address(text, address):
    assert ipv4_or_empty(text) == address

"""The NAT network's XML (tuned for fast DHCP) and which DHCP lease counts."""

from __future__ import annotations

import time
import xml.etree.ElementTree as ET
from typing import Any

import libvirt
import pytest

from etcd_compute.virt import network


def test_network_xml_is_tuned_for_fast_dhcp() -> None:
    root = ET.fromstring(network.network_xml("net", "10.9.8.0/24"))
    assert root.findtext("name") == "net"
    assert root.find("forward").get("mode") == "nat"
    assert root.find("bridge").attrib == {"stp": "off", "delay": "0"}
    assert root.find("ip").attrib == {"address": "10.9.8.1", "netmask": "255.255.255.0"}
    assert root.find("ip/dhcp/range").attrib == {"start": "10.9.8.2", "end": "10.9.8.254"}
    options = root.findall(f"{{{network.DNSMASQ_NAMESPACE}}}options/")
    assert [option.get("value") for option in options] == ["no-ping"]


def test_the_dnsmasq_options_use_libvirts_namespace() -> None:
    text = network.network_xml("net", "10.9.8.0/24")
    assert 'xmlns:dnsmasq="http://libvirt.org/schemas/network/dnsmasq/1.0"' in text
    assert "<dnsmasq:option value=\"no-ping\"" in text


def test_the_smallest_usable_network_has_a_gateway_and_two_guests() -> None:
    root = ET.fromstring(network.network_xml("net", "10.0.0.0/29"))
    assert root.find("ip").get("address") == "10.0.0.1"
    assert root.find("ip/dhcp/range").attrib == {"start": "10.0.0.2", "end": "10.0.0.6"}


@pytest.mark.parametrize("cidr", ["10.0.0.0/30", "10.0.0.0/31", "10.0.0.4/32"])
def test_a_network_too_small_for_a_gateway_and_guests_is_refused(cidr: str) -> None:
    with pytest.raises(ValueError, match=f"network_cidr {cidr}: too small"):
        network.network_xml("net", cidr)


def test_a_cidr_with_host_bits_is_refused() -> None:
    with pytest.raises(ValueError):
        network.network_xml("net", "10.0.0.5/24")


def test_a_network_name_is_escaped_not_interpreted() -> None:
    root = ET.fromstring(network.network_xml("a<b>&c", "10.0.0.0/24"))
    assert root.findtext("name") == "a<b>&c"


def test_a_network_larger_than_a_slash_16_is_not_called_too_small() -> None:
    try:
        network.network_xml("net", "10.0.0.0/15")
    except ValueError as exc:  # refusing a huge DHCP range is fine; calling it small is not
        assert "too small" not in str(exc)


class FakeNetwork:
    """Stands in for virNetwork.DHCPLeases, which the test driver does not implement."""

    def __init__(self, leases: list[dict[str, Any]]):
        self.leases = leases

    def DHCPLeases(self, mac: str | None = None) -> list[dict[str, Any]]:  # noqa: N802
        return [lease for lease in self.leases if mac is None or lease["mac"] == mac]


def lease(mac: str, ip: str, expires_in: float | None,
          kind: int = libvirt.VIR_IP_ADDR_TYPE_IPV4) -> dict[str, Any]:
    return {
        "mac": mac, "ipaddr": ip,
        "expirytime": 0 if expires_in is None else int(time.time() + expires_in),
        "type": kind, "prefix": 24, "iface": "virbr9",
    }


def test_leases_ignore_expired_entries_and_prefer_the_newest() -> None:
    net = FakeNetwork([
        lease("52:54:00:00:00:01", "10.0.0.5", -10),  # stale: the guest was destroyed
        lease("52:54:00:00:00:02", "10.0.0.5", 3500),
        lease("52:54:00:00:00:03", "10.0.0.6", 100),
        lease("52:54:00:00:00:03", "10.0.0.7", 3600),
    ])
    assert network.macs_for_ip(net, "10.0.0.5") == ["52:54:00:00:00:02"]
    assert network.lease_ip(net, "52:54:00:00:00:03") == "10.0.0.7"
    assert network.lease_ip(net, "52:54:00:00:00:01") is None
    assert network.macs_for_ip(net, "10.0.0.9") == []


def test_a_lease_without_an_expiry_time_is_current() -> None:
    net = FakeNetwork([lease("52:54:00:00:00:01", "10.0.0.5", None)])
    assert network.lease_ip(net, "52:54:00:00:00:01") == "10.0.0.5"
    assert network.macs_for_ip(net, "10.0.0.5") == ["52:54:00:00:00:01"]


def test_ipv6_leases_are_not_addresses_we_report() -> None:
    net = FakeNetwork([lease("52:54:00:00:00:01", "fd00::5", 100,
                             libvirt.VIR_IP_ADDR_TYPE_IPV6)])
    assert network.lease_ip(net, "52:54:00:00:00:01") is None
    assert network.macs_for_ip(net, "fd00::5") == []


def test_macs_for_an_address_are_lower_case_newest_first() -> None:
    net = FakeNetwork([lease("52:54:00:00:00:AA", "10.0.0.5", 10),
                       lease("52:54:00:00:00:BB", "10.0.0.5", 1000)])
    assert network.macs_for_ip(net, "10.0.0.5") == ["52:54:00:00:00:bb", "52:54:00:00:00:aa"]

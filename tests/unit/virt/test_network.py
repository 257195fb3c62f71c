"""The NAT network's XML (tuned for fast DHCP) and which DHCP lease counts."""

from __future__ import annotations

import re
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


def test_every_host_s_network_has_the_same_gateway_mac() -> None:
    mac = ET.fromstring(network.network_xml("net", "10.9.8.0/24")).find("mac").get("address")
    assert mac == network.gateway_mac("net", "10.9.8.0/24")
    assert re.fullmatch(r"02:ec(:[0-9a-f]{2}){4}", mac)  # locally administered, unicast
    assert network.gateway_mac("net", "10.9.8.0/24") == mac  # on any host
    assert network.gateway_mac("other", "10.9.8.0/24") != mac
    assert network.gateway_mac("net", "10.9.9.0/24") != mac


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

    def __init__(self, leases: list[dict[str, Any]], reserved: dict[str, str] | None = None):
        self.leases, self.reserved = leases, reserved or {}

    def DHCPLeases(self, mac: str | None = None) -> list[dict[str, Any]]:  # noqa: N802
        return [lease for lease in self.leases if mac is None or lease["mac"] == mac]

    def XMLDesc(self, flags: int = 0) -> str:  # noqa: N802
        hosts = "".join(f"<host mac='{mac}' ip='{ip}'/>" for mac, ip in self.reserved.items())
        return f"<network><ip address='10.0.0.1'><dhcp>{hosts}</dhcp></ip></network>"


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


def test_a_reserved_address_is_held_by_its_mac_after_any_lease_on_it():
    net = FakeNetwork([lease("52:54:00:00:00:01", "10.0.0.5", 100)],
                      reserved={"52:54:00:00:00:02": "10.0.0.5",
                                "52:54:00:00:00:03": "10.0.0.6"})
    assert network.macs_for_ip(net, "10.0.0.5") == ["52:54:00:00:00:01", "52:54:00:00:00:02"]
    assert network.holder_of(net, "10.0.0.6") == "52:54:00:00:00:03"
    assert network.holder_of(net, "10.0.0.7") is None


def test_a_reservation_is_made_replaced_and_released_live_and_in_the_definition():
    connection = libvirt.open("test:///default")
    try:
        net = connection.networkLookupByName("default")
        network.reserve(net, "52:54:00:AA:00:01", "192.168.122.50")
        assert network.reservations(net) == {"52:54:00:aa:00:01": "192.168.122.50"}
        network.reserve(net, "52:54:00:aa:00:01", "192.168.122.51")  # moved on again
        assert network.reservations(net) == {"52:54:00:aa:00:01": "192.168.122.51"}
        # (The test driver describes the running network only; a real one was checked to
        # keep reservations across a restart of the network by hand.)
        assert network.release(net, "52:54:00:aa:00:01") is True
        assert network.release(net, "52:54:00:aa:00:01") is False
        assert network.reservations(net) == {}
        with pytest.raises(ValueError):
            network.reserve(net, "52:54:00:aa:00:01", "not-an-address")
    finally:
        connection.close()

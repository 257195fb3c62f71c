"""Our nwfilters as XML (what libvirt gets): clean-traffic, the host guard, the metadata cap."""

from __future__ import annotations

import socket
import xml.etree.ElementTree as ET
from types import SimpleNamespace

import libvirt
import pytest

from etcd_compute.virt import nwfilter
from etcd_compute.virt.domain import domain_xml
from tests import support


def test_the_guest_filter_is_clean_traffic_and_the_host_guard():
    root = ET.fromstring(nwfilter.guest_filter_xml(8))
    assert root.get("name") == "etcd-compute-guest" and root.get("chain") == "root"
    assert [r.get("filter") for r in root.iterfind("filterref")] == [
        "clean-traffic", "etcd-compute-host-guard"]


@pytest.mark.parametrize("cap", [1, 8, 50])
def test_the_guest_filter_caps_a_guests_connections_to_the_metadata_server(cap):
    """libvirt makes it an iptables rule on traffic from the guest: `-p tcp -d
    169.254.169.254 --dport 80 -m connlimit --connlimit-above CAP -j DROP`."""
    rules = ET.fromstring(nwfilter.guest_filter_xml(cap)).findall("rule")
    assert [(r.attrib, [(child.tag, child.attrib) for child in r]) for r in rules] == [
        ({"action": "drop", "direction": "out", "priority": "100"},
         [("tcp", {"dstipaddr": "169.254.169.254", "dstportstart": "80",
                   "connlimit-above": str(cap)})]),
    ]


def test_the_host_guard_lets_through_dhcp_dns_and_metadata_only():
    root = ET.fromstring(nwfilter.host_guard_xml(["10.0.0.5", "192.168.124.1"]))
    # After clean-traffic's spoofing check (-710), before it accepts all IPv4 out (-650).
    assert root.get("chain").startswith("ipv4") and -710 < int(root.get("priority")) < -650
    rules = [(r.get("action"), int(r.get("priority")), r.find("ip").attrib)
             for r in root.iterfind("rule")]
    assert all(r.get("direction") == "out" for r in root.iterfind("rule"))
    allowed = [ip for action, _, ip in rules if action == "return"]
    assert allowed == [
        {"protocol": "udp", "dstportstart": "67"},
        {"dstipaddr": "$DHCPSERVER", "protocol": "udp", "dstportstart": "53"},
        {"dstipaddr": "$DHCPSERVER", "protocol": "tcp", "dstportstart": "53"},
        {"dstipaddr": "169.254.169.254", "protocol": "tcp", "dstportstart": "80"},
    ]
    dropped = [ip for action, _, ip in rules if action == "drop"]
    assert dropped == [
        {"dstipaddr": "$DHCPSERVER"},
        {"dstipaddr": "169.254.169.254"},
        # Multicast and broadcast, which the host's sockets on 0.0.0.0 hear, in any frame.
        {"dstipaddr": "224.0.0.0", "dstipmask": "4"},
        {"dstipaddr": "255.255.255.255"},
        {"dstmacaddr": "ff:ff:ff:ff:ff:ff"},
        {"dstipaddr": "10.0.0.5"},
        {"dstipaddr": "192.168.124.1"},
    ]
    last_allowed = max(p for action, p, _ in rules if action == "return")
    assert all(p > last_allowed for action, p, _ in rules if action == "drop")


def test_the_host_guard_lets_a_guest_answer_the_hosts_ssh_connections_only():
    """Its answers from port 22 to the gateway pass the guard (ebtables, stateless), and
    the guest filter drops those that are not of a connection the host opened (libvirt
    makes it an iptables rule on the guest's packets to the host, matching conntrack's
    NEW and INVALID). tests/virt/test_guest_isolation.py shows a guest's own connection
    from port 22 stopped."""
    def guard_rules(xml: str) -> list[tuple[str, int, dict[str, str]]]:
        return [(r.get("action"), int(r.get("priority")), r.find("ip").attrib)
                for r in ET.fromstring(xml).iterfind("rule")]

    rules = guard_rules(nwfilter.host_guard_xml(["192.168.124.1"], host_ssh=True))
    ssh = {"dstipaddr": "$DHCPSERVER", "protocol": "tcp", "srcportstart": "22"}
    (priority,) = [p for action, p, ip in rules if action == "return" and ip == ssh]
    assert all(p > priority for action, p, _ in rules if action == "drop")
    # Nothing else of the guard changes.
    assert [r for r in rules if r[2] != ssh] == guard_rules(
        nwfilter.host_guard_xml(["192.168.124.1"]))
    guest = ET.fromstring(nwfilter.guest_filter_xml(8, host_ssh=True))
    assert [(r.get("action"), r.get("direction"), r.find("tcp").attrib)
            for r in guest.iterfind("rule")][1:] == [
        ("drop", "out", {"dstipaddr": "$DHCPSERVER", "srcportstart": "22",
                         "state": "NEW,INVALID"})]
    assert ET.fromstring(nwfilter.guest_filter_xml(8)).findall("rule")[1:] == []


@pytest.mark.parametrize("missing", [None, "no br_netfilter"])
def test_ssh_answers_pass_only_where_iptables_sees_bridged_packets(monkeypatch, missing):
    """Without br_netfilter the guest filter's conntrack rule would match nothing: the
    guard then lets nothing from port 22 through."""
    monkeypatch.setattr(nwfilter, "bridge_netfilter_missing", lambda: missing)
    monkeypatch.setattr(nwfilter, "host_addresses", lambda: ["192.168.124.1"])
    monkeypatch.setattr(nwfilter, "host_broadcast_addresses", lambda: [])
    connection = FakeFilters()
    nwfilter.ensure_filters(connection, 8)
    guard = connection.filters["etcd-compute-host-guard"][1]
    guest = connection.filters["etcd-compute-guest"][1]
    from_22 = [ip for ip in ET.fromstring(guard).iter("ip") if ip.get("srcportstart") == "22"]
    conntrack = [tcp for tcp in ET.fromstring(guest).iter("tcp") if tcp.get("state")]
    assert (len(from_22), len(conntrack)) == ((1, 1) if missing is None else (0, 0))


def test_the_comparison_ignores_what_libvirt_adds_or_reorders():
    ours = nwfilter.guest_filter_xml(8)
    libvirts = ("<filter chain='root' name='etcd-compute-guest'>\n  <uuid>x</uuid>\n"
                "  <filterref filter='clean-traffic'/>\n"
                "  <filterref filter='etcd-compute-host-guard'/>\n"
                "  <rule priority='100' action='drop' direction='out'>\n"
                "    <tcp connlimit-above='8' dstportstart='80' dstipaddr='169.254.169.254'/>\n"
                "  </rule>\n</filter>")
    assert nwfilter._canonical(ours) == nwfilter._canonical(libvirts)
    assert nwfilter._canonical(ours) != nwfilter._canonical(
        libvirts.replace("clean-traffic", "allow-arp"))
    assert nwfilter._canonical(ours) != nwfilter._canonical(
        libvirts.replace("connlimit-above='8'", "connlimit-above='9'"))


def test_the_nic_carries_the_filter_bound_to_the_dhcp_lease():
    spec = support.domain_spec("0b7e4f1e-9a0c-4a51-8f0e-5d2c3b4a6e7f",
                               nic_filter="etcd-compute-guest", dhcp_server="192.168.123.1")
    filterref = ET.fromstring(domain_xml(spec)).find("devices/interface/filterref")
    assert filterref.get("filter") == "etcd-compute-guest"
    assert {p.get("name"): p.get("value") for p in filterref.iterfind("parameter")} == {
        "CTRL_IP_LEARNING": "dhcp", "DHCPSERVER": "192.168.123.1"}
    assert nwfilter.gateway_of("192.168.123.0/24") == "192.168.123.1"


class FakeFilters:
    """libvirt's nwfilter calls as far as `ensure_filters` uses them, with libvirt's rule
    that a definition under an existing name must carry that filter's uuid."""

    def __init__(self) -> None:
        self.filters: dict[str, tuple[str, str]] = {}  # name -> (uuid, xml)

    def nwfilterLookupByName(self, name: str):  # noqa: N802 (libvirt's name)
        if name not in self.filters:
            error = libvirt.libvirtError("no nwfilter")
            error.err = (libvirt.VIR_ERR_NO_NWFILTER,) + (None,) * 8
            raise error
        uuid, xml = self.filters[name]
        return SimpleNamespace(XMLDesc=lambda _flags: xml, UUIDString=lambda: uuid)

    def nwfilterDefineXML(self, xml: str) -> None:  # noqa: N802
        root = ET.fromstring(xml)
        name, uuid = root.get("name"), root.findtext("uuid") or f"new-{len(self.filters)}"
        if name in self.filters and self.filters[name][0] != uuid:
            raise libvirt.libvirtError(f"filter '{name}' already exists with uuid ...")
        self.filters[name] = (uuid, xml)


def test_changed_host_addresses_update_the_guard_in_place(monkeypatch):
    connection = FakeFilters()
    monkeypatch.setattr(nwfilter, "host_addresses", lambda: ["192.168.124.1"])
    monkeypatch.setattr(nwfilter, "host_broadcast_addresses", lambda: ["192.168.124.255"])
    assert nwfilter.ensure_filters(connection, 8) == "etcd-compute-guest"
    uuid = connection.filters["etcd-compute-host-guard"][0]
    # An address comes up on the host (another bridge, a DHCP renewal): the next build
    # updates the guard, keeping its uuid, instead of failing on libvirt's refusal.
    monkeypatch.setattr(nwfilter, "host_addresses", lambda: ["10.77.0.1", "192.168.124.1"])
    nwfilter.ensure_filters(connection, 8)
    updated_uuid, xml = connection.filters["etcd-compute-host-guard"]
    assert updated_uuid == uuid
    assert "10.77.0.1" in [ip.get("dstipaddr") for ip in ET.fromstring(xml).iter("ip")]
    nwfilter.ensure_filters(connection, 8)  # unchanged: nothing to define
    assert connection.filters["etcd-compute-host-guard"] == (uuid, xml)


def test_the_guard_drops_the_broadcast_addresses_of_the_hosts_networks(monkeypatch):
    connection = FakeFilters()
    monkeypatch.setattr(nwfilter, "host_addresses", lambda: ["192.168.124.1"])
    monkeypatch.setattr(nwfilter, "host_broadcast_addresses", lambda: ["192.168.124.255"])
    nwfilter.ensure_filters(connection, 8)
    xml = connection.filters["etcd-compute-host-guard"][1]
    dropped = {ip.get("dstipaddr") for rule in ET.fromstring(xml).iterfind("rule")
               if rule.get("action") == "drop" for ip in rule.iterfind("ip")}
    assert {"192.168.124.1", "192.168.124.255"} <= dropped


def test_broadcast_addresses_come_from_each_prefix_too(monkeypatch):
    def snic(address, netmask, broadcast=None):
        return SimpleNamespace(family=socket.AF_INET, address=address, netmask=netmask,
                               broadcast=broadcast, ptp=None)

    monkeypatch.setattr(nwfilter.psutil, "net_if_addrs", lambda: {
        "lo": [snic("127.0.0.1", "255.0.0.0")],
        "eth0": [snic("192.0.2.2", "255.255.255.0", "192.0.2.255")],
        "br0": [snic("10.77.1.1", "255.255.255.0")],  # added without brd
        "metadata": [snic("169.254.169.254", "255.255.255.255")],
    })
    assert nwfilter.host_broadcast_addresses() == ["10.77.1.255", "192.0.2.255"]


def test_a_changed_cap_updates_the_guest_filter_in_place(monkeypatch):
    connection = FakeFilters()
    monkeypatch.setattr(nwfilter, "host_addresses", lambda: ["192.168.124.1"])
    monkeypatch.setattr(nwfilter, "host_broadcast_addresses", lambda: [])
    nwfilter.ensure_filters(connection, 8)
    uuid = connection.filters["etcd-compute-guest"][0]
    nwfilter.ensure_filters(connection, 16)
    updated_uuid, xml = connection.filters["etcd-compute-guest"]
    assert updated_uuid == uuid
    assert ET.fromstring(xml).find("rule/tcp").get("connlimit-above") == "16"


def test_the_cap_needs_iptables_to_see_bridged_packets(tmp_path):
    setting = tmp_path / "bridge-nf-call-iptables"
    assert "br_netfilter is not loaded" in nwfilter.bridge_netfilter_missing(setting)
    setting.write_text("0\n")
    assert nwfilter.bridge_netfilter_missing(setting).startswith(f"{setting} is 0: ")
    setting.write_text("1\n")
    assert nwfilter.bridge_netfilter_missing(setting) is None


def test_a_host_where_the_cap_cannot_work_is_told_once(monkeypatch, caplog):
    monkeypatch.setattr(nwfilter, "_bridge_netfilter_checked", False)
    monkeypatch.setattr(nwfilter, "bridge_netfilter_missing", lambda: "no br_netfilter")
    monkeypatch.setattr(nwfilter, "host_addresses", lambda: [])
    monkeypatch.setattr(nwfilter, "host_broadcast_addresses", lambda: [])
    connection = FakeFilters()
    nwfilter.ensure_filters(connection, 8)
    nwfilter.ensure_filters(connection, 8)
    assert [r.getMessage() for r in caplog.records if r.levelname == "WARNING"] == [
        "no br_netfilter"]


def test_a_guest_in_no_group_keeps_the_anti_spoofing_and_the_guard_and_only_dhcp():
    root = ET.fromstring(nwfilter.isolated_filter_xml())
    assert root.get("name") == "etcd-compute-guest-isolated" and root.get("chain") == "root"
    assert [r.get("filter") for r in root.iterfind("filterref")] == [
        "clean-traffic", "etcd-compute-host-guard", "etcd-compute-no-group"]
    iso = ET.fromstring(nwfilter.no_group_xml())
    # After the guard (-705), before clean-traffic accepts IPv4 in (-700) and out (-650).
    assert iso.get("chain").startswith("ipv4-") and -705 < int(iso.get("priority")) < -700
    rules = [(r.get("action"), r.get("direction"), int(r.get("priority")), r.find("ip").attrib)
             for r in iso.iterfind("rule")]
    assert rules == [
        ("return", "out", 100, {"protocol": "udp", "srcportstart": "68", "dstportstart": "67"}),
        ("return", "in", 110, {"protocol": "udp", "srcportstart": "67", "dstportstart": "68"}),
        ("drop", "inout", 500, {}),  # every other IPv4 packet, both ways
    ]


def test_the_filter_follows_the_groups_absent_being_the_default_one():
    assert nwfilter.guest_filter_for(None) == nwfilter.GUEST_FILTER  # built before groups
    assert nwfilter.guest_filter_for(["default"]) == nwfilter.GUEST_FILTER
    assert nwfilter.guest_filter_for([]) == nwfilter.ISOLATED_FILTER


def test_the_swap_names_only_our_filtered_interfaces_keeping_the_rest():
    spec = support.domain_spec("0b7e4f1e-9a0c-4a51-8f0e-5d2c3b4a6e7f",
                               nic_filter="etcd-compute-guest", dhcp_server="192.168.123.1",
                               macs=("52:54:00:12:34:56",))
    xml = domain_xml(spec)
    assert nwfilter.refiltered_interfaces(xml, nwfilter.GUEST_FILTER) == []  # has it already
    (nic,) = nwfilter.refiltered_interfaces(xml, nwfilter.ISOLATED_FILTER)
    swapped, before = ET.fromstring(nic), ET.fromstring(xml).find("devices/interface")
    assert swapped.find("filterref").get("filter") == "etcd-compute-guest-isolated"
    assert [p.attrib for p in swapped.iterfind("filterref/parameter")] == \
        [p.attrib for p in before.iterfind("filterref/parameter")]
    assert (swapped.find("mac").get("address"), swapped.find("source").attrib) == \
        (before.find("mac").get("address"), before.find("source").attrib)
    foreign = xml.replace("etcd-compute-guest", "someone-elses")
    assert nwfilter.refiltered_interfaces(foreign, nwfilter.ISOLATED_FILTER) == []


def test_every_filter_is_defined_and_removed_together(monkeypatch):
    monkeypatch.setattr(nwfilter, "_bridge_netfilter_checked", True)
    monkeypatch.setattr(nwfilter, "host_addresses", lambda: ["10.0.0.5"])
    monkeypatch.setattr(nwfilter, "host_broadcast_addresses", lambda: [])
    connection = FakeFilters()
    nwfilter.ensure_filters(connection, 8)
    assert sorted(connection.filters) == sorted([
        "etcd-compute-host-guard", "etcd-compute-guest", "etcd-compute-no-group",
        "etcd-compute-guest-isolated"])

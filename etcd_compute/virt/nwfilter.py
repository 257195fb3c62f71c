"""The guest network's trust boundary, as libvirt nwfilters (ebtables).

Every NIC on our network carries GUEST_FILTER with CTRL_IP_LEARNING=dhcp and
DHCPSERVER=the network's gateway:

- libvirt's `clean-traffic`: frames only from the NIC's own MAC, IPv4 only
  from the address its DHCP lease gave it (learned from the gateway's DHCP
  answers), ARP only for that pair: no IP, MAC or ARP spoofing. So a guest
  cannot pass for another one towards the metadata server.
- HOST_GUARD_FILTER: towards the host, only DHCP, DNS (to the gateway) and
  the metadata server (169.254.169.254:80); every other packet to the
  gateway, the metadata address or any other address of the host is dropped,
  and so is all IPv4 multicast and broadcast but DHCP (the host's sockets on
  0.0.0.0 hear 224.0.0.1 and the broadcast addresses of its networks; a guest
  may send them in frames to any MAC). Guests keep the NAT route to
  elsewhere, and unicast to each other.
- the host's SSH connections to its guests (a user logging in from the host,
  Tempest's validation): a guest answers them from its port 22 to the gateway,
  which the guard lets through (ebtables keeps no connection state), and the
  guest filter's iptables rule then drops every such packet that is not of a
  connection the host opened (conntrack's ESTABLISHED): the guest still opens
  none to the host, from port 22 or any other. Only where iptables sees bridged
  packets (as for the cap below): elsewhere the guard stays shut, and the host
  cannot log in to its guests.
- the metadata cap: a guest's TCP connections to 169.254.169.254:80 past
  `connections_per_guest` are dropped (iptables `connlimit`, counted by the
  kernel's connection tracking; libvirt applies it to traffic from the guest only).
  The metadata server has the same cap per source address (mdserver/admission.py):
  this one stops the packets before they reach it. libvirt finds a guest's packets
  to the host by their bridge port (iptables `physdev`), which the kernel tells
  iptables only with br_netfilter and net.bridge.bridge-nf-call-iptables=1; without
  them the rule matches nothing (the compute says so once; tools/install.sh sets
  them on test and demo machines; a host setting, left to the operator elsewhere).
  With this rule libvirt gives each NIC iptables chains too (FI-/FO-/HI-vnetN) and
  accepts the guest's routed packets in `libvirt-in-post`, before the network's own
  LIBVIRT_FWO source check: clean-traffic already holds the guest to its address.

Security groups (the compute API's): there is one, `default`, and it is what the
network does for every guest, GUEST_FILTER. A guest in no group carries
ISOLATED_FILTER instead, as Neutron treats a port with port security and no groups:
the same clean-traffic and host guard, and NO_GROUP_FILTER, which drops every IPv4
packet from and to it but its DHCP (requests out to port 67, answers in from port
67 to 68), so it keeps its address and reaches nothing else: not the other guests,
not NAT, not the host, and not DNS nor the metadata server (Neutron's isolated port
reaches neither: its DNS and metadata are services on the network like any other;
the guest keeps its identity on the config drive). Which filter a NIC carries is
`guest_filter_for(groups)`; `refiltered_interfaces` gives the interfaces of a domain
to swap (the driver updates them, running or not).

The compute defines them all (if missing or changed) before it builds on the
network; `remove_filters` is for clean-up (demo, tests).
"""

from __future__ import annotations

import ipaddress
import logging
import xml.etree.ElementTree as ET
from collections.abc import Iterable
from pathlib import Path

import libvirt
import psutil

from etcd_compute.virt.network import METADATA_ADDRESS

log = logging.getLogger(__name__)

GUEST_FILTER = "etcd-compute-guest"
SSH_PORT = "22"
HOST_GUARD_FILTER = "etcd-compute-host-guard"
# Before clean-traffic accepts outgoing IPv4 (-650) and after its spoofing check (-710).
HOST_GUARD_CHAIN, HOST_GUARD_PRIORITY = "ipv4-host", "-705"
ISOLATED_FILTER = "etcd-compute-guest-isolated"
NO_GROUP_FILTER = "etcd-compute-no-group"
# After the host guard, before clean-traffic's incoming (-700) and outgoing (-650) accepts.
NO_GROUP_CHAIN, NO_GROUP_PRIORITY = "ipv4-iso", "-704"


BRIDGE_NF_CALL_IPTABLES = Path("/proc/sys/net/bridge/bridge-nf-call-iptables")
_bridge_netfilter_checked = False


def bridge_netfilter_missing(setting: Path = BRIDGE_NF_CALL_IPTABLES) -> str | None:
    """None when iptables sees bridged packets (what the metadata cap needs); else why not."""
    try:
        value = setting.read_text().strip()
    except OSError:
        return ("br_netfilter is not loaded: the guest filter's cap on metadata connections "
                "has no effect (modprobe br_netfilter; the metadata server still caps each "
                "guest), and the guests do not answer the host's SSH connections")
    if value != "1":
        return (f"{setting} is {value}: the guest filter's cap on metadata connections has no "
                "effect (sysctl net.bridge.bridge-nf-call-iptables=1; the metadata server "
                "still caps each guest), and the guests do not answer the host's SSH "
                "connections")
    return None


def gateway_of(cidr: str) -> str:
    return str(ipaddress.IPv4Network(cidr).network_address + 1)


def host_addresses() -> list[str]:
    """This host's IPv4 addresses (but loopback, which guests cannot reach anyway)."""
    found = {
        address.address
        for addresses in psutil.net_if_addrs().values()
        for address in addresses
        if address.family.name == "AF_INET" and not address.address.startswith("127.")
    }
    return sorted(found)


def host_broadcast_addresses() -> list[str]:
    """The broadcast addresses of this host's IPv4 networks (the kernel takes the last
    address of each prefix up to /30 as one, whether or not it was given as `brd`)."""
    found = set()
    for addresses in psutil.net_if_addrs().values():
        for address in addresses:
            if address.family.name != "AF_INET" or address.address.startswith("127."):
                continue
            if address.broadcast:
                found.add(address.broadcast)
            if address.netmask:
                net = ipaddress.IPv4Interface(f"{address.address}/{address.netmask}").network
                if net.prefixlen < 31:
                    found.add(str(net.broadcast_address))
    return sorted(found)


def _rule(filter_element: ET.Element, action: str, priority: int, **ip: str) -> None:
    rule = ET.SubElement(filter_element, "rule", action=action, direction="out",
                         priority=str(priority))
    ET.SubElement(rule, "ip", ip)


def host_guard_xml(addresses: Iterable[str], host_ssh: bool = False) -> str:
    """What a guest may send to the host: DHCP, DNS to the gateway, the metadata server;
    with `host_ssh`, TCP from its port 22 to the gateway too (its answers to the host's
    SSH connections: `guest_filter_xml` with `host_ssh` keeps those and drops the rest).

    `addresses`: the host's addresses and broadcast addresses, each dropped.
    """
    guard = ET.Element("filter", name=HOST_GUARD_FILTER, chain=HOST_GUARD_CHAIN,
                       priority=HOST_GUARD_PRIORITY)
    _rule(guard, "return", 100, protocol="udp", dstportstart="67")  # DHCP (broadcast too)
    _rule(guard, "return", 110, dstipaddr="$DHCPSERVER", protocol="udp", dstportstart="53")
    _rule(guard, "return", 120, dstipaddr="$DHCPSERVER", protocol="tcp", dstportstart="53")
    _rule(guard, "return", 130, dstipaddr=METADATA_ADDRESS, protocol="tcp", dstportstart="80")
    if host_ssh:
        _rule(guard, "return", 140, dstipaddr="$DHCPSERVER", protocol="tcp",
              srcportstart=SSH_PORT)
    _rule(guard, "drop", 500, dstipaddr="$DHCPSERVER")
    _rule(guard, "drop", 510, dstipaddr=METADATA_ADDRESS)
    _rule(guard, "drop", 511, dstipaddr="224.0.0.0", dstipmask="4")  # multicast
    _rule(guard, "drop", 512, dstipaddr="255.255.255.255")
    # Broadcast frames: also to a broadcast address the list lacks (libvirt takes only
    # prefix masks, so not "every group MAC"; multicast is dropped by its address).
    _rule(guard, "drop", 513, dstmacaddr="ff:ff:ff:ff:ff:ff")
    for number, address in enumerate(sorted(set(addresses))):
        _rule(guard, "drop", 520 + number, dstipaddr=address)
    return ET.tostring(guard, encoding="unicode")


def guest_filter_xml(connections_per_guest: int, host_ssh: bool = False) -> str:
    """clean-traffic, the host guard, and the cap on a guest's metadata connections; with
    `host_ssh`, what the guard lets through from the guest's port 22 to the gateway is
    dropped unless it belongs to a connection the host opened (iptables, conntrack)."""
    guest = ET.Element("filter", name=GUEST_FILTER, chain="root")
    ET.SubElement(guest, "filterref", filter="clean-traffic")
    ET.SubElement(guest, "filterref", filter=HOST_GUARD_FILTER)
    cap = ET.SubElement(guest, "rule", action="drop", direction="out", priority="100")
    ET.SubElement(cap, "tcp", {"dstipaddr": METADATA_ADDRESS, "dstportstart": "80",
                               "connlimit-above": str(connections_per_guest)})
    if host_ssh:
        answers = ET.SubElement(guest, "rule", action="drop", direction="out", priority="110")
        ET.SubElement(answers, "tcp", {"dstipaddr": "$DHCPSERVER", "srcportstart": SSH_PORT,
                                       "state": "NEW,INVALID"})
    return ET.tostring(guest, encoding="unicode")


def no_group_xml() -> str:
    """A guest in no security group: every IPv4 packet from or to it dropped but DHCP."""
    iso = ET.Element("filter", name=NO_GROUP_FILTER, chain=NO_GROUP_CHAIN,
                     priority=NO_GROUP_PRIORITY)
    out = ET.SubElement(iso, "rule", action="return", direction="out", priority="100")
    ET.SubElement(out, "ip", protocol="udp", srcportstart="68", dstportstart="67")
    answer = ET.SubElement(iso, "rule", action="return", direction="in", priority="110")
    ET.SubElement(answer, "ip", protocol="udp", srcportstart="67", dstportstart="68")
    drop = ET.SubElement(iso, "rule", action="drop", direction="inout", priority="500")
    ET.SubElement(drop, "ip")
    return ET.tostring(iso, encoding="unicode")


def isolated_filter_xml() -> str:
    """clean-traffic, the host guard (they are no group's: they always apply), no group."""
    guest = ET.Element("filter", name=ISOLATED_FILTER, chain="root")
    for name in ("clean-traffic", HOST_GUARD_FILTER, NO_GROUP_FILTER):
        ET.SubElement(guest, "filterref", filter=name)
    return ET.tostring(guest, encoding="unicode")


def guest_filter_for(groups: list[str] | None) -> str:
    """The filter of a NIC whose instance is in `groups` (None: as built before there
    were groups to change: the default one). The one group there is, `default`, is the
    network as it is."""
    return GUEST_FILTER if groups is None or groups else ISOLATED_FILTER


def refiltered_interfaces(domain_xml: str, wanted: str) -> list[str]:
    """The XML of each of the domain's interfaces that carries one of our guest filters
    other than `wanted`, with `wanted` instead (parameters, MAC, everything else kept):
    what `virDomainUpdateDeviceFlags` takes to swap it."""
    ours = (GUEST_FILTER, ISOLATED_FILTER)
    changed = []
    for nic in ET.fromstring(domain_xml).iter("interface"):
        filterref = nic.find("filterref")
        if filterref is None or filterref.get("filter") not in ours or \
                filterref.get("filter") == wanted:
            continue
        filterref.set("filter", wanted)
        changed.append(ET.tostring(nic, encoding="unicode"))
    return changed


def _canonical(xml: str) -> tuple[object, ...]:
    """A filter's XML without what libvirt adds (uuid) or reorders (attributes, spaces)."""
    def walk(element: ET.Element) -> tuple[object, ...]:
        children = tuple(walk(child) for child in element if child.tag != "uuid")
        return element.tag, tuple(sorted(element.attrib.items())), children

    return walk(ET.fromstring(xml))


def _with_uuid(xml: str, uuid: str) -> str:
    element = ET.fromstring(xml)
    uuid_element = ET.Element("uuid")
    uuid_element.text = uuid
    element.insert(0, uuid_element)
    return ET.tostring(element, encoding="unicode")


def _ensure(connection: libvirt.virConnect, name: str, xml: str) -> None:
    try:
        existing = connection.nwfilterLookupByName(name)
    except libvirt.libvirtError as exc:
        if exc.get_error_code() != libvirt.VIR_ERR_NO_NWFILTER:
            raise
        existing = None
    if existing is not None:
        if _canonical(existing.XMLDesc(0)) == _canonical(xml):
            return
        # An update keeps the filter's uuid: libvirt refuses a definition under an existing
        # name with another uuid, and gives one without a uuid a new random one.
        xml = _with_uuid(xml, existing.UUIDString())
    connection.nwfilterDefineXML(xml)
    log.info("nwfilter %s: %s", name, "updated" if existing else "defined")


def ensure_filters(connection: libvirt.virConnect, connections_per_guest: int) -> str:
    """Define our filters if missing or changed (callers hold a lock); the guest filter's name.
    A change reaches the running guests too (libvirt re-instantiates their filters)."""
    global _bridge_netfilter_checked
    why = bridge_netfilter_missing()
    if not _bridge_netfilter_checked:
        _bridge_netfilter_checked = True
        if why:
            log.warning("%s", why)
    # The host's SSH connections are answered only where the guest filter's iptables rule
    # can tell them from the guest's own (a setting changed later shows at the next build).
    host_ssh = why is None
    addresses = [*host_addresses(), *host_broadcast_addresses()]
    _ensure(connection, HOST_GUARD_FILTER, host_guard_xml(addresses, host_ssh))
    _ensure(connection, GUEST_FILTER, guest_filter_xml(connections_per_guest, host_ssh))
    _ensure(connection, NO_GROUP_FILTER, no_group_xml())
    _ensure(connection, ISOLATED_FILTER, isolated_filter_xml())
    return GUEST_FILTER


def remove_filters(uri: str) -> None:
    """Undefine our filters (demo and test clean-up; refused while a guest uses them)."""
    connection = libvirt.open(uri)
    try:
        for name in (GUEST_FILTER, ISOLATED_FILTER, NO_GROUP_FILTER, HOST_GUARD_FILTER):
            try:
                connection.nwfilterLookupByName(name).undefine()
            except libvirt.libvirtError as exc:
                if exc.get_error_code() != libvirt.VIR_ERR_NO_NWFILTER:
                    raise
    finally:
        connection.close()

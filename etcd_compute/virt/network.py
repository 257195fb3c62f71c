"""The libvirt NAT network guests attach to, its DHCP leases and the metadata address.

The network is tuned for fast DHCP: stp off with no forward delay (the bridge
forwards at once), and dnsmasq's `no-ping` (it offers an address without first
pinging it for a few seconds). Measured: first lease 5-7.5 s after start
instead of ~9 s for the test guest under TCG.

Every host's network of a name and range has the same gateway MAC (from a hash of
both, locally administered): a guest moved live from another host finds its gateway
at the MAC its ARP cache holds, and its traffic flows at once.

The metadata server listens on 169.254.169.254, which we add as a /32 on the
network's bridge: guests reach it through their default route (the bridge),
and the server sees each guest's own address as the source.

A guest moved here from another host keeps the address it had there (every host's
network has the same range, and the guest does not know it moved): the address
is reserved for its MAC in this network's DHCP (`reserve`), so its renewals and
reboots get it again, and `holder_of` (a lease or a reservation) says who has an
address here before one is brought in.
"""

from __future__ import annotations

import hashlib
import ipaddress
import logging
import subprocess
import time
import xml.etree.ElementTree as ET
from typing import Any

import libvirt

log = logging.getLogger(__name__)

DNSMASQ_NAMESPACE = "http://libvirt.org/schemas/network/dnsmasq/1.0"
METADATA_ADDRESS = "169.254.169.254"


def network_xml(name: str, cidr: str) -> str:
    subnet = ipaddress.IPv4Network(cidr)
    if subnet.num_addresses < 8:
        raise ValueError(f"network_cidr {cidr}: too small for a gateway and guests")
    gateway = subnet.network_address + 1
    first, last = subnet.network_address + 2, subnet.broadcast_address - 1

    ET.register_namespace("dnsmasq", DNSMASQ_NAMESPACE)
    network = ET.Element("network")
    ET.SubElement(network, "name").text = name
    ET.SubElement(network, "forward", mode="nat")
    ET.SubElement(network, "bridge", stp="off", delay="0")
    ET.SubElement(network, "mac", address=gateway_mac(name, cidr))
    ip = ET.SubElement(network, "ip", address=str(gateway), netmask=str(subnet.netmask))
    dhcp = ET.SubElement(ip, "dhcp")
    ET.SubElement(dhcp, "range", start=str(first), end=str(last))
    options = ET.SubElement(network, f"{{{DNSMASQ_NAMESPACE}}}options")
    ET.SubElement(options, f"{{{DNSMASQ_NAMESPACE}}}option", value="no-ping")
    return ET.tostring(network, encoding="unicode")


def gateway_mac(name: str, cidr: str) -> str:
    """The network's bridge MAC, the same on every host: 02:ec (locally administered,
    unicast) and four bytes of the hash of its name and range."""
    digest = hashlib.sha256(f"{name}\n{ipaddress.IPv4Network(cidr)}".encode()).digest()
    return "02:ec:" + ":".join(f"{byte:02x}" for byte in digest[:4])


def ensure_network(connection: libvirt.virConnect, name: str, cidr: str) -> libvirt.virNetwork:
    """The network `name`, defined, started and autostarted if it was not.

    Callers in several processes should hold a lock around this.
    """
    try:
        network = connection.networkLookupByName(name)
    except libvirt.libvirtError as exc:
        if exc.get_error_code() != libvirt.VIR_ERR_NO_NETWORK:
            raise
        log.info("network %s: defining (%s)", name, cidr)
        network = connection.networkDefineXML(network_xml(name, cidr))
    if not network.isActive():
        log.info("network %s: starting", name)
        network.create()
    if not network.autostart():
        network.setAutostart(True)
    return network


def current_leases(network: libvirt.virNetwork, mac: str | None = None) -> list[dict[str, Any]]:
    """Unexpired IPv4 leases, newest first (libvirt keeps stale ones for their lease time,
    e.g. after a guest was destroyed without releasing its address)."""
    now = time.time()
    leases = [
        lease
        for lease in (network.DHCPLeases(mac) if mac else network.DHCPLeases())
        if lease.get("type") == libvirt.VIR_IP_ADDR_TYPE_IPV4
        and (not lease.get("expirytime") or lease["expirytime"] > now)
    ]
    return sorted(leases, key=lambda lease: lease.get("expirytime") or 0, reverse=True)


def lease_ip(network: libvirt.virNetwork, mac: str) -> str | None:
    """The guest's address from its current lease, or None if it has none yet."""
    leases = [lease for lease in current_leases(network, mac) if lease["mac"].lower() == mac]
    return leases[0]["ipaddr"] if leases else None


def macs_for_ip(network: libvirt.virNetwork, ip: str) -> list[str]:
    """MACs holding a current lease on `ip`, newest lease first, then the one it is
    reserved for (a guest moved here before it renewed its lease here)."""
    macs = [lease["mac"].lower() for lease in current_leases(network) if lease["ipaddr"] == ip]
    reserved = [mac for mac, address in reservations(network).items() if address == ip]
    return macs + [mac for mac in reserved if mac not in macs]


def reservations(network: libvirt.virNetwork) -> dict[str, str]:
    """{MAC: address} of the network's DHCP reservations."""
    root = ET.fromstring(network.XMLDesc(0))
    return {host.get("mac", "").lower(): host.get("ip", "")
            for host in root.iterfind("ip/dhcp/host") if host.get("mac") and host.get("ip")}


def holder_of(network: libvirt.virNetwork, ip: str) -> str | None:
    """The MAC that holds `ip` here (a current lease, else a reservation), or None."""
    macs = macs_for_ip(network, ip)
    return macs[0] if macs else None


_LIVE_AND_CONFIG = (libvirt.VIR_NETWORK_UPDATE_AFFECT_LIVE
                    | libvirt.VIR_NETWORK_UPDATE_AFFECT_CONFIG)


def reserve(network: libvirt.virNetwork, mac: str, ip: str) -> None:
    """Reserve `ip` for `mac` in the network's DHCP (replacing the MAC's earlier one)."""
    release(network, mac)
    host = ET.Element("host", mac=mac.lower(), ip=str(ipaddress.IPv4Address(ip)))
    network.update(libvirt.VIR_NETWORK_UPDATE_COMMAND_ADD_LAST,
                   libvirt.VIR_NETWORK_SECTION_IP_DHCP_HOST, -1,
                   ET.tostring(host, encoding="unicode"), _LIVE_AND_CONFIG)


def release(network: libvirt.virNetwork, mac: str) -> bool:
    """Drop the MAC's reservation; False if it had none."""
    address = reservations(network).get(mac.lower())
    if address is None:
        return False
    host = ET.Element("host", mac=mac.lower(), ip=address)
    network.update(libvirt.VIR_NETWORK_UPDATE_COMMAND_DELETE,
                   libvirt.VIR_NETWORK_SECTION_IP_DHCP_HOST, -1,
                   ET.tostring(host, encoding="unicode"), _LIVE_AND_CONFIG)
    return True


def _ip(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["ip", *args], capture_output=True, text=True, check=False)


def has_metadata_address(bridge: str) -> bool:
    shown = _ip("-4", "-o", "addr", "show", "dev", bridge, "to", f"{METADATA_ADDRESS}/32")
    return shown.returncode == 0 and METADATA_ADDRESS in shown.stdout


def add_metadata_address(bridge: str) -> None:
    """Put 169.254.169.254/32 on the bridge (idempotent)."""
    result = _ip("addr", "replace", f"{METADATA_ADDRESS}/32", "dev", bridge)
    if result.returncode != 0:
        raise OSError(f"ip addr replace {METADATA_ADDRESS} dev {bridge}: {result.stderr.strip()}")


def remove_metadata_address(bridge: str) -> None:
    """Take it off again (nothing happens if the bridge or address is gone)."""
    _ip("addr", "del", f"{METADATA_ADDRESS}/32", "dev", bridge)


def remove_network(uri: str, name: str) -> bool:
    """Stop and undefine the network `name` (demo and test clean-up); False if absent."""
    connection = libvirt.open(uri)
    try:
        try:
            network = connection.networkLookupByName(name)
        except libvirt.libvirtError as exc:
            if exc.get_error_code() == libvirt.VIR_ERR_NO_NETWORK:
                return False
            raise
        if network.isActive():
            network.destroy()
        network.undefine()
        log.info("network %s: removed", name)
        return True
    finally:
        connection.close()

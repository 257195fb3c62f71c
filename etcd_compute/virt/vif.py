"""A guest's NIC on a Neutron port (network.backend neutron): the interface XML that plugs
it into the host's Open vSwitch integration bridge, as Nova's libvirt driver plugs an OVS
port when os-vif leaves the tap to libvirt.

    <interface type='bridge'>
      <mac address='PORT_MAC'/>
      <source bridge='br-int'/>
      <virtualport type='openvswitch'><parameters interfaceid='PORT_ID'/></virtualport>
      <target dev='tapPORT_ID[:11]'/>
      <model type='virtio'/>
      <driver name='qemu'><host csum='off' gso='off' .../></driver>
      <mtu size='NETWORK_MTU'/>
    </interface>

libvirt creates the tap and runs `ovs-vsctl add-port br-int tap... -- set Interface ...
external_ids:iface-id=PORT_ID`; the host's ovn-controller claims the port for its chassis
and Neutron sets it ACTIVE. The tap's offloads are off (`<host .../>`): Open vSwitch's
userspace datapath hands the guest's frames to a Geneve tunnel, which drops frames that
still carry offload flags (partial checksums, large segments). The MTU is the network's
(1442 on Geneve): the guest's virtio NIC and the tap take it. Values reach the XML only as
attributes set through ElementTree; the port's id and MAC are checked here all the same.
"""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET
from dataclasses import dataclass
from typing import Any

PORT_ID = re.compile(r"\A[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}\Z")
MAC = re.compile(r"\A[0-9a-f]{2}(:[0-9a-f]{2}){5}\Z")
BRIDGE = re.compile(r"\A[A-Za-z0-9_.-]{1,15}\Z")
# Guest offloads off on the tap (see above): Nova's libvirt driver writes the same element
# for vhost-net taps when asked to.
HOST_OFFLOADS_OFF = ("csum", "gso", "tso4", "tso6", "ecn", "ufo")
MIN_MTU, MAX_MTU = 576, 65535


@dataclass(frozen=True)
class Vif:
    """One NIC: the Neutron port it is, its MAC, the network's MTU, the bridge it joins."""

    port_id: str
    mac: str
    mtu: int | None = None
    bridge: str = "br-int"

    def __post_init__(self) -> None:
        if not PORT_ID.match(self.port_id):
            raise ValueError(f"VIF: port id {self.port_id!r} is not a uuid")
        if not MAC.match(self.mac):
            raise ValueError(f"VIF: MAC {self.mac!r} of port {self.port_id} is not a MAC")
        if not BRIDGE.match(self.bridge):
            raise ValueError(f"VIF: bridge {self.bridge!r} is not a device name")
        if self.mtu is not None and not MIN_MTU <= self.mtu <= MAX_MTU:
            raise ValueError(f"VIF: MTU {self.mtu} of port {self.port_id} is out of range")

    @property
    def device(self) -> str:
        """The tap's name: `tap` and the port id's start (Nova's; 14 characters, under
        the kernel's 15)."""
        return f"tap{self.port_id[:11]}"

    def as_dict(self) -> dict[str, Any]:
        return {"port_id": self.port_id, "mac": self.mac, "mtu": self.mtu,
                "bridge": self.bridge}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Vif:
        return cls(str(data["port_id"]), str(data["mac"]).lower(),
                   int(data["mtu"]) if data.get("mtu") is not None else None,
                   str(data.get("bridge") or "br-int"))


def interface_element(vif: Vif) -> ET.Element:
    """The domain's `<interface>` for `vif`."""
    nic = ET.Element("interface", type="bridge")
    ET.SubElement(nic, "mac", address=vif.mac)
    ET.SubElement(nic, "source", bridge=vif.bridge)
    virtualport = ET.SubElement(nic, "virtualport", type="openvswitch")
    ET.SubElement(virtualport, "parameters", interfaceid=vif.port_id)
    ET.SubElement(nic, "target", dev=vif.device)
    ET.SubElement(nic, "model", type="virtio")
    driver = ET.SubElement(nic, "driver", name="qemu")
    ET.SubElement(driver, "host", {offload: "off" for offload in HOST_OFFLOADS_OFF})
    if vif.mtu is not None:
        ET.SubElement(nic, "mtu", size=str(vif.mtu))
    return nic


def interface_xml(vif: Vif) -> str:
    return ET.tostring(interface_element(vif), encoding="unicode")


def port_ids(domain_xml: str) -> list[str]:
    """The Neutron ports (`interfaceid`s) a domain's NICs are plugged as."""
    root = ET.fromstring(domain_xml)
    return [parameters.get("interfaceid", "") for parameters in
            root.iterfind("devices/interface/virtualport/parameters")
            if parameters.get("interfaceid")]


def interface_of(domain_xml: str, port_id: str) -> str | None:
    """The domain's `<interface>` plugged as Neutron port `port_id` (as libvirt wrote it,
    which is what detachDeviceFlags matches), or None."""
    root = ET.fromstring(domain_xml)
    for nic in root.iterfind("devices/interface"):
        parameters = nic.find("virtualport/parameters")
        if parameters is not None and parameters.get("interfaceid") == port_id:
            return ET.tostring(nic, encoding="unicode")
    return None

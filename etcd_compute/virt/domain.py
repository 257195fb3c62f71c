"""The libvirt domain of an instance, as XML built with ElementTree.

User-supplied values (the instance name) only ever reach the XML as element
text or attribute values set through ElementTree, which escapes them.

Our domains carry a metadata element in our own namespace; only domains with
it are reported as instances, so other domains on the host are left alone.
"""

from __future__ import annotations

import os
import time
import xml.etree.ElementTree as ET
from dataclasses import dataclass
from pathlib import Path

import libvirt

from etcd_compute.virt.vif import Vif, interface_element

NAMESPACE = "https://etcd-compute.invalid/xmlns/instance/1"
NAMESPACE_PREFIX = "etcdcompute"


@dataclass(frozen=True)
class DomainSpec:
    """What the domain XML is made from."""

    uuid: str
    name: str
    memory_mb: int
    vcpus: int
    domain_type: str  # kvm, qemu or test
    disk: Path
    config_drive: Path
    console_log: Path
    network: str | None = None
    bridge: str | None = None
    # The nwfilter on the NIC of `network`, bound to its DHCP lease from `dhcp_server`.
    nic_filter: str | None = None
    dhcp_server: str | None = None
    # The NICs' MAC addresses (network's, then bridge's) when they are kept from elsewhere
    # (a guest moved from another host); libvirt picks new ones where missing.
    macs: tuple[str, ...] = ()
    # NICs on Neutron ports (network.backend neutron; virt/vif.py), after the others.
    vifs: tuple[Vif, ...] = ()


def _sub(parent: ET.Element, tag: str, text: str | None = None, **attrs: str) -> ET.Element:
    element = ET.SubElement(parent, tag, attrs)
    if text is not None:
        element.text = text
    return element


def domain_xml(spec: DomainSpec) -> str:
    domain = ET.Element("domain", type=spec.domain_type)
    _sub(domain, "name", spec.uuid)
    _sub(domain, "uuid", spec.uuid)
    _sub(domain, "title", spec.name)
    metadata = _sub(domain, "metadata")
    metadata.append(ownership_element(spec.name))
    _sub(domain, "memory", str(spec.memory_mb), unit="MiB")
    _sub(domain, "vcpu", str(spec.vcpus))

    os_element = _sub(domain, "os")
    # i440fx: its IDE controller carries the config-drive cdrom that every guest can read.
    _sub(os_element, "type", "hvm", arch="x86_64", machine="pc")
    _sub(os_element, "boot", dev="hd")
    features = _sub(domain, "features")
    _sub(features, "acpi")
    _sub(features, "apic")
    if spec.domain_type == "kvm":
        _sub(domain, "cpu", mode="host-passthrough")
    _sub(domain, "clock", offset="utc")
    _sub(domain, "on_poweroff", "destroy")
    _sub(domain, "on_reboot", "restart")
    _sub(domain, "on_crash", "destroy")

    devices = _sub(domain, "devices")
    disk = _sub(devices, "disk", type="file", device="disk")
    _sub(disk, "driver", name="qemu", type="qcow2")
    _sub(disk, "source", file=str(spec.disk))
    _sub(disk, "target", dev="vda", bus="virtio")

    cdrom = _sub(devices, "disk", type="file", device="cdrom")
    _sub(cdrom, "driver", name="qemu", type="raw")
    _sub(cdrom, "source", file=str(spec.config_drive))
    _sub(cdrom, "target", dev="hdc", bus="ide")
    _sub(cdrom, "readonly")

    macs = list(spec.macs)
    if spec.network:
        nic = _sub(devices, "interface", type="network")
        if macs:
            _sub(nic, "mac", address=macs.pop(0))
        _sub(nic, "source", network=spec.network)
        _sub(nic, "model", type="virtio")
        if spec.nic_filter:
            filterref = _sub(nic, "filterref", filter=spec.nic_filter)
            # The IP the filter allows is the one DHCP from the gateway leases.
            _sub(filterref, "parameter", name="CTRL_IP_LEARNING", value="dhcp")
            if spec.dhcp_server:
                _sub(filterref, "parameter", name="DHCPSERVER", value=spec.dhcp_server)
    if spec.bridge:
        nic = _sub(devices, "interface", type="bridge")
        if macs:
            _sub(nic, "mac", address=macs.pop(0))
        _sub(nic, "source", bridge=spec.bridge)
        _sub(nic, "model", type="virtio")
    for vif in spec.vifs:
        devices.append(interface_element(vif))

    # The pty keeps `virsh console` working; virtlogd copies everything to the log file.
    serial = _sub(devices, "serial", type="pty")
    _sub(serial, "log", file=str(spec.console_log), append="off")
    _sub(serial, "target", port="0")
    console = _sub(devices, "console", type="pty")
    _sub(console, "target", type="serial", port="0")
    # The guest's screen: VNC that listens nowhere, neither on an address nor on a socket
    # file; libvirt hands one connected descriptor to whoever asks through its own
    # (root-only) socket (virDomainOpenGraphicsFD: drivers/libvirt_screens.py), which is
    # how the compute's console relay reaches it (remote_consoles.py).
    graphics = _sub(devices, "graphics", type="vnc")
    _sub(graphics, "listen", type="none")
    video = _sub(devices, "video")
    _sub(video, "model", type="vga")
    _sub(devices, "memballoon", model="none")
    # Randomness from the host's /dev/urandom: the guest kernel's random pool is ready as
    # soon as its virtio-rng driver loads, instead of when a program first waits on it
    # (an SSH server making its host key), which has the kernel make it from timing jitter:
    # about 1 s of CPU under TCG. Nova's hw_rng device.
    rng = _sub(devices, "rng", model="virtio")
    _sub(rng, "backend", "/dev/urandom", model="random")
    return ET.tostring(domain, encoding="unicode")


def ownership_element(name: str) -> ET.Element:
    """The metadata element that marks a domain as one of our instances."""
    element = ET.Element(f"{{{NAMESPACE}}}instance")
    _sub(element, f"{{{NAMESPACE}}}name", name)
    return element


ET.register_namespace(NAMESPACE_PREFIX, NAMESPACE)


def is_ours(domain: libvirt.virDomain) -> bool:
    try:
        domain.metadata(libvirt.VIR_DOMAIN_METADATA_ELEMENT, NAMESPACE)
    except libvirt.libvirtError:
        return False
    return True


def mac_addresses(domain: libvirt.virDomain, network: str | None = None) -> list[str]:
    """MACs of the domain's NICs (only those on `network` when given)."""
    root = ET.fromstring(domain.XMLDesc(0))
    macs = []
    for nic in root.iterfind("devices/interface"):
        source = nic.find("source")
        if network and (source is None or source.get("network") != network):
            continue
        mac = nic.find("mac")
        if mac is not None and mac.get("address"):
            macs.append(mac.get("address").lower())
    return macs


def kvm_usable() -> bool:
    return os.access("/dev/kvm", os.R_OK | os.W_OK)


def choose_domain_type(setting: str, connection: libvirt.virConnect) -> str:
    """kvm, qemu (TCG) or test, from the `domain_type` setting and the hypervisor."""
    if connection.getType().lower() == "test":
        return "test"
    if setting == "auto":
        return "kvm" if kvm_usable() else "qemu"
    return setting


def resized_xml(xml: str, memory_mb: int, vcpus: int) -> str:
    """A domain definition (`virDomain.XMLDesc`) with new memory and vCPUs, all else kept
    (its uuid, MAC addresses, disks and filters): what a resize redefines."""
    root = ET.fromstring(xml)
    for tag in ("memory", "currentMemory"):
        element = root.find(tag)
        if element is None and tag == "memory":
            element = ET.SubElement(root, tag)
        if element is not None:
            element.attrib = {"unit": "MiB"}
            element.text = str(memory_mb)
    vcpu = root.find("vcpu")
    if vcpu is None:
        vcpu = ET.SubElement(root, "vcpu")
    vcpu.attrib.pop("current", None)  # at most the new count: all of them online
    vcpu.text = str(vcpus)
    return ET.tostring(root, encoding="unicode")


def size_of(domain: libvirt.virDomain) -> tuple[int, int]:
    """(memory MiB, vCPUs) the domain is defined with."""
    root = ET.fromstring(domain.XMLDesc(libvirt.VIR_DOMAIN_XML_INACTIVE))
    memory = root.find("memory")
    units = {"KiB": 1024, "k": 1024, "MiB": 1024**2, "M": 1024**2, "GiB": 1024**3,
             "G": 1024**3, "b": 1, "bytes": 1}
    assert memory is not None and memory.text
    scale = units.get(memory.get("unit", "KiB"), 1024)
    vcpu = root.find("vcpu")
    return int(memory.text) * scale // 1024**2, int(vcpu.text if vcpu is not None and
                                                     vcpu.text else 1)


def _ignoring_gone(call: object) -> bool:
    """Run `call()`; False when the domain was not running (or gone) already."""
    try:
        call()  # type: ignore[operator]
    except libvirt.libvirtError as exc:
        if exc.get_error_code() in (libvirt.VIR_ERR_OPERATION_INVALID,
                                    libvirt.VIR_ERR_NO_DOMAIN):
            return False
        raise
    return True


def power_off(domain: libvirt.virDomain) -> bool:
    """Stop the guest at once (libvirt's destroy: the definition stays); False if it was
    not running."""
    if not domain.isActive():
        return False
    return _ignoring_gone(domain.destroy)


def shut_down(domain: libvirt.virDomain, timeout: float, poll: float = 0.2) -> str:
    """Ask the guest to power off (ACPI) and wait up to `timeout` s, then power it off
    hard: "stopped" (it was not running), "shut down" or "powered off"."""
    if not domain.isActive():
        return "stopped"
    if timeout > 0 and _ignoring_gone(domain.shutdown):
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if not domain.isActive():
                return "shut down"
            time.sleep(poll)
    return "powered off" if power_off(domain) else "shut down"

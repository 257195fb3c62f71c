"""Domain XML built without libvirt, which domains are ours, their MACs, KVM or TCG; and
that libvirt accepts the XML (its test driver, test:///default, in-process)."""

from __future__ import annotations

import uuid as uuidlib
import xml.etree.ElementTree as ET
from typing import Any

import libvirt
import pytest

from etcd_compute.virt import domain
from tests import support

UUID = "0b7e4f1e-9a0c-4a51-8f0e-5d2c3b4a6e7f"


def domain_spec(**overrides: Any) -> domain.DomainSpec:
    return support.domain_spec(UUID, **overrides)


def parsed(**overrides: Any) -> ET.Element:
    return ET.fromstring(domain.domain_xml(domain_spec(**overrides)))


def test_the_domain_is_named_by_the_uuid_and_titled_by_the_escaped_name():
    text = domain.domain_xml(domain_spec())
    root = ET.fromstring(text)
    assert root.get("type") == "qemu"
    assert root.findtext("name") == UUID and root.findtext("uuid") == UUID
    assert root.findtext("title") == "web <1> & 'two'"
    assert "<1>" not in text  # escaped, not markup


def test_the_domain_has_the_resources_it_was_given():
    root = parsed(memory_mb=512, vcpus=3)
    assert root.find("memory").attrib == {"unit": "MiB"} and root.findtext("memory") == "512"
    assert root.findtext("vcpu") == "3"


def test_the_domain_carries_our_ownership_metadata():
    root = parsed()
    owner = root.find(f"metadata/{{{domain.NAMESPACE}}}instance")
    assert owner is not None
    assert owner.findtext(f"{{{domain.NAMESPACE}}}name") == "web <1> & 'two'"
    assert f"xmlns:{domain.NAMESPACE_PREFIX}=" in domain.domain_xml(domain_spec())


def test_disks_config_drive_and_console_log_point_into_the_instance_directory():
    root = parsed()
    disks = {d.find("target").get("dev"): d for d in root.iterfind("devices/disk")}
    assert disks["vda"].find("driver").get("type") == "qcow2"
    assert disks["vda"].find("source").get("file") == f"/instances/{UUID}/disk.qcow2"
    assert disks["vda"].find("target").get("bus") == "virtio"
    assert disks["hdc"].get("device") == "cdrom" and disks["hdc"].find("readonly") is not None
    assert disks["hdc"].find("source").get("file") == f"/instances/{UUID}/config.iso"
    log = root.find("devices/serial/log")
    assert log.attrib == {"file": f"/instances/{UUID}/console.log", "append": "off"}
    assert root.find("devices/console/target").get("type") == "serial"


def test_the_guest_gets_randomness_from_the_hosts_urandom():
    (rng,) = parsed().iterfind("devices/rng")
    assert rng.get("model") == "virtio"
    assert (rng.find("backend").attrib, rng.findtext("backend")) == (
        {"model": "random"}, "/dev/urandom")


@pytest.mark.parametrize(
    ("network", "bridge", "nics"),
    [("etcd-compute", None, [("network", "network", "etcd-compute")]),
     ("etcd-compute", "br0", [("network", "network", "etcd-compute"),
                              ("bridge", "bridge", "br0")]),
     (None, "br0", [("bridge", "bridge", "br0")]),
     (None, None, [])],
)
def test_nics_follow_the_network_and_bridge(network, bridge, nics):
    root = parsed(network=network, bridge=bridge)
    found = [(nic.get("type"), *next(iter(nic.find("source").attrib.items())))
             for nic in root.iterfind("devices/interface")]
    assert found == nics
    assert all(nic.find("model").get("type") == "virtio"
               for nic in root.iterfind("devices/interface"))


def test_a_moved_guest_keeps_its_macs_in_nic_order():
    root = parsed(network="etcd-compute", bridge="br0",
                  macs=("52:54:00:00:00:01", "52:54:00:00:00:02"))
    assert [nic.find("mac").get("address") for nic in root.iterfind("devices/interface")] == \
        ["52:54:00:00:00:01", "52:54:00:00:00:02"]
    # Missing ones are libvirt's to pick.
    root = parsed(network="etcd-compute", bridge="br0", macs=("52:54:00:00:00:01",))
    assert [nic.find("mac") is not None for nic in root.iterfind("devices/interface")] == \
        [True, False]


@pytest.mark.parametrize(("domain_type", "passthrough"),
                         [("kvm", True), ("qemu", False), ("test", False)])
def test_only_kvm_passes_the_host_cpu_through(domain_type, passthrough):
    cpu = parsed(domain_type=domain_type).find("cpu")
    assert (cpu is not None and cpu.get("mode") == "host-passthrough") is passthrough


class FakeDomain:
    def __init__(self, xml: str, ours: bool):
        self.xml, self.ours = xml, ours
        self.asked: list[tuple[int, str]] = []

    def XMLDesc(self, flags: int = 0) -> str:  # noqa: N802 (libvirt's names)
        return self.xml

    def metadata(self, kind: int, uri: str, flags: int = 0) -> str:
        self.asked.append((kind, uri))
        if not self.ours:
            raise libvirt.libvirtError("metadata not found")
        return "<instance/>"


def test_a_domain_is_ours_when_it_has_our_metadata_element():
    ours, foreign = FakeDomain("<domain/>", True), FakeDomain("<domain/>", False)
    assert domain.is_ours(ours) and not domain.is_ours(foreign)
    assert ours.asked == [(libvirt.VIR_DOMAIN_METADATA_ELEMENT, domain.NAMESPACE)]


def with_macs(xml: str, macs: list[str | None]) -> str:
    root = ET.fromstring(xml)
    for nic, mac in zip(root.iterfind("devices/interface"), macs, strict=True):
        if mac is not None:
            ET.SubElement(nic, "mac", address=mac)
    return ET.tostring(root, encoding="unicode")


def test_mac_addresses_are_lower_case_and_filtered_by_network():
    xml = with_macs(domain.domain_xml(domain_spec(bridge="br0")),
                    ["52:54:00:AA:BB:CC", "52:54:00:11:22:33"])
    guest = FakeDomain(xml, True)
    assert domain.mac_addresses(guest) == ["52:54:00:aa:bb:cc", "52:54:00:11:22:33"]
    assert domain.mac_addresses(guest, "etcd-compute") == ["52:54:00:aa:bb:cc"]
    assert domain.mac_addresses(guest, "other") == []


def test_a_nic_without_a_mac_is_skipped():
    xml = with_macs(domain.domain_xml(domain_spec(bridge="br0")), [None, "52:54:00:11:22:33"])
    assert domain.mac_addresses(FakeDomain(xml, True)) == ["52:54:00:11:22:33"]


def test_domain_type_choice(monkeypatch: pytest.MonkeyPatch) -> None:
    class Qemu:
        def getType(self) -> str:  # noqa: N802 (libvirt's name)
            return "QEMU"

    class Test:
        def getType(self) -> str:  # noqa: N802
            return "Test"

    monkeypatch.setattr(domain, "kvm_usable", lambda: True)
    assert domain.choose_domain_type("auto", Qemu()) == "kvm"
    assert domain.choose_domain_type("qemu", Qemu()) == "qemu"
    assert domain.choose_domain_type("kvm", Test()) == "test"
    monkeypatch.setattr(domain, "kvm_usable", lambda: False)
    assert domain.choose_domain_type("auto", Qemu()) == "qemu"
    assert domain.choose_domain_type("kvm", Qemu()) == "kvm"  # asked for: not second-guessed


def test_a_resized_definition_changes_memory_and_vcpus_only():
    xml = domain.domain_xml(domain_spec(memory_mb=256, vcpus=2))
    original = ET.fromstring(xml)
    ET.SubElement(original, "currentMemory", unit="KiB").text = "262144"
    original.find("vcpu").set("current", "1")
    resized = ET.fromstring(domain.resized_xml(ET.tostring(original, encoding="unicode"),
                                               1024, 4))
    assert (resized.find("memory").text, resized.find("memory").get("unit")) == ("1024", "MiB")
    assert resized.find("currentMemory").text == "1024"
    assert resized.find("vcpu").text == "4" and resized.find("vcpu").get("current") is None
    for kept in ("name", "uuid", "title", "devices", "metadata", "os"):
        assert ET.tostring(resized.find(kept)) == ET.tostring(original.find(kept))


# -- against libvirt's test driver --------------------------------------------------------


def test_domain_xml_validates_and_carries_the_allocation() -> None:
    uuid = str(uuidlib.uuid4())
    spec = support.domain_spec(uuid, domain_type="test", network="default", bridge="br-ext")
    connection = libvirt.open("test:///default")
    try:
        defined = connection.defineXMLFlags(
            domain.domain_xml(spec), libvirt.VIR_DOMAIN_DEFINE_VALIDATE
        )
        root = ET.fromstring(defined.XMLDesc(0))
        assert root.findtext("name") == uuid and root.findtext("uuid") == uuid
        assert root.findtext("title") == "web <1> & 'two'"  # escaped, not interpreted
        assert root.find("memory").text == str(256 * 1024)  # KiB
        assert root.findtext("vcpu") == "2"
        disks = {d.find("target").get("dev"): d for d in root.iterfind("devices/disk")}
        assert disks["vda"].find("target").get("bus") == "virtio"
        assert disks["vda"].find("source").get("file").endswith("disk.qcow2")
        assert disks["hdc"].get("device") == "cdrom"
        nics = root.findall("devices/interface")
        assert [n.get("type") for n in nics] == ["network", "bridge"]
        assert all(n.find("model").get("type") == "virtio" for n in nics)
        log = root.find("devices/serial/log")
        assert log.get("file").endswith("console.log") and log.get("append") == "off"
        assert domain.is_ours(defined)
        assert domain.mac_addresses(defined, "default") == [
            nics[0].find("mac").get("address").lower()
        ]
        defined.undefine()
    finally:
        connection.close()


def test_foreign_domains_are_not_ours() -> None:
    connection = libvirt.open("test:///default")
    try:
        assert not domain.is_ours(connection.lookupByName("test"))  # the test driver's own
    finally:
        connection.close()


def test_the_guests_screen_is_vnc_that_listens_nowhere():
    (graphics,) = parsed().iterfind("devices/graphics")
    assert graphics.get("type") == "vnc"
    assert [listen.attrib for listen in graphics.iterfind("listen")] == [{"type": "none"}]
    # No address, port, socket or password anywhere: libvirt hands out a descriptor.
    assert set(graphics.attrib) == {"type"}
    assert parsed().find("devices/video/model").get("type") == "vga"

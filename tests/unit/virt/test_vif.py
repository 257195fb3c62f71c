"""virt/vif.py: a NIC on a Neutron port as Nova's libvirt driver plugs an OVS port (its
interface XML), what it refuses to write, and libvirt (its test driver) taking it."""

from __future__ import annotations

import xml.etree.ElementTree as ET

import libvirt
import pytest

from etcd_compute.virt import domain, vif
from tests import support

PORT = "3f2a6c1e-7b4d-4e8a-9c0f-1a2b3c4d5e6f"
MAC = "fa:16:3e:12:34:56"


def test_the_interface_is_an_ovs_virtualport_on_br_int_named_by_the_port():
    nic = ET.fromstring(vif.interface_xml(vif.Vif(PORT, MAC, 1442)))
    assert nic.tag == "interface" and nic.get("type") == "bridge"
    assert nic.find("mac").get("address") == MAC
    assert nic.find("source").get("bridge") == "br-int"
    assert nic.find("virtualport").get("type") == "openvswitch"
    assert nic.find("virtualport/parameters").get("interfaceid") == PORT
    assert nic.find("target").get("dev") == "tap3f2a6c1e-7b" == vif.Vif(PORT, MAC).device
    assert nic.find("model").get("type") == "virtio"
    assert nic.find("mtu").get("size") == "1442"
    # No offloads the Geneve tunnel of OVS's userspace datapath would drop.
    assert nic.find("driver").get("name") == "qemu"
    assert nic.find("driver/host").attrib == {k: "off" for k in vif.HOST_OFFLOADS_OFF}


def test_without_an_mtu_the_bridges_is_left_to_libvirt():
    assert ET.fromstring(vif.interface_xml(vif.Vif(PORT, MAC))).find("mtu") is None


@pytest.mark.parametrize("fields", [
    {"port_id": "x' /><evil"}, {"mac": "fa:16:3e:12:34:56'"}, {"mac": "FA-16"},
    {"bridge": "br-int bad"}, {"mtu": 70000}, {"mtu": 100}])
def test_what_is_no_port_mac_bridge_or_mtu_is_refused(fields):
    values = {"port_id": PORT, "mac": MAC, "mtu": 1442, "bridge": "br-int", **fields}
    with pytest.raises(ValueError, match="VIF: "):
        vif.Vif(**values)


def test_a_vif_travels_as_a_dict_and_back():
    one = vif.Vif(PORT, MAC, 1442, "br-alt")
    assert vif.Vif.from_dict(one.as_dict()) == one
    assert vif.Vif.from_dict({"port_id": PORT, "mac": MAC.upper()}) == vif.Vif(PORT, MAC)


def test_the_domain_carries_its_vifs_after_its_other_nics_and_libvirt_takes_it():
    spec = support.domain_spec("0b7e4f1e-9a0c-4a51-8f0e-5d2c3b4a6e7f", domain_type="test",
                               vifs=(vif.Vif(PORT, MAC, 1442),))
    text = domain.domain_xml(spec)
    assert vif.port_ids(text) == [PORT]
    connection = libvirt.open("test:///default")
    try:
        defined = connection.defineXMLFlags(text, libvirt.VIR_DOMAIN_DEFINE_VALIDATE)
        assert vif.port_ids(defined.XMLDesc(0)) == [PORT]
        defined.undefine()
    finally:
        connection.close()


def test_a_domains_nic_is_found_by_its_port_as_libvirt_wrote_it() -> None:
    one = vif.Vif("5e0f7a1c-2b3d-4e5f-8a9b-0c1d2e3f4a5b", "fa:16:3e:00:00:01", 1442)
    other = vif.Vif("6e0f7a1c-2b3d-4e5f-8a9b-0c1d2e3f4a5b", "fa:16:3e:00:00:02")
    xml = (f"<domain><devices><interface type='network'/>{vif.interface_xml(other)}"
           f"{vif.interface_xml(one)}</devices></domain>")
    assert vif.interface_of(xml, one.port_id) == vif.interface_xml(one)
    assert vif.interface_of(xml, "7e0f7a1c-2b3d-4e5f-8a9b-0c1d2e3f4a5b") is None

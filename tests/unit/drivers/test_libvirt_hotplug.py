"""drivers/libvirt_hotplug.py: a Neutron port's NIC plugged into a running guest and its
definition, once (a job run again plugs nothing more), and unplugged from both; a stopped
guest's definition only; a guest slow to let the NIC go asked again. libvirt's test driver
has no device hot-plug: the domain is a stand-in keeping its live and defined XML."""

from __future__ import annotations

import xml.etree.ElementTree as ET

import libvirt
import pytest

from etcd_compute.drivers import libvirt_hotplug
from etcd_compute.drivers.libvirt import LibvirtDriver
from etcd_compute.errors import BuildError
from etcd_compute.virt import vif as vifs

PORT = "5e0f7a1c-2b3d-4e5f-8a9b-0c1d2e3f4a5b"
VIF = {"port_id": PORT, "mac": "fa:16:3e:00:00:01", "mtu": 1442, "bridge": "br-int"}


class Domain:
    """A domain's live and defined XML; `holds` detach requests the guest ignores."""

    def __init__(self, active: bool = True, holds: int = 0):
        empty = "<domain><devices></devices></domain>"
        self.xml = {libvirt.VIR_DOMAIN_AFFECT_LIVE: empty, libvirt.VIR_DOMAIN_AFFECT_CONFIG: empty}
        self.active, self.holds, self.asked = active, holds, 0

    def isActive(self) -> bool:  # noqa: N802 (libvirt's name)
        return self.active

    def XMLDesc(self, flags: int) -> str:  # noqa: N802
        return self.xml[libvirt.VIR_DOMAIN_AFFECT_CONFIG if flags else
                        libvirt.VIR_DOMAIN_AFFECT_LIVE]

    def attachDeviceFlags(self, device: str, affect: int) -> None:  # noqa: N802
        if affect == libvirt.VIR_DOMAIN_AFFECT_LIVE:
            assert self.active
        root = ET.fromstring(self.xml[affect])
        devices = root.find("devices")
        assert devices is not None
        devices.append(ET.fromstring(device))
        self.xml[affect] = ET.tostring(root, encoding="unicode")

    def detachDeviceFlags(self, device: str, affect: int) -> None:  # noqa: N802
        self.asked += 1
        if affect == libvirt.VIR_DOMAIN_AFFECT_LIVE and self.asked <= self.holds:
            return
        root = ET.fromstring(self.xml[affect])
        devices = root.find("devices")
        assert devices is not None
        for nic in devices.findall("interface"):
            if ET.tostring(nic, encoding="unicode") == device:
                devices.remove(nic)
        self.xml[affect] = ET.tostring(root, encoding="unicode")


@pytest.fixture
def domain(monkeypatch: pytest.MonkeyPatch, driver: LibvirtDriver) -> Domain:
    made = Domain()
    monkeypatch.setattr(driver, "_domain", lambda uuid: made if uuid == UUID else
                        pytest.fail("another domain"))
    monkeypatch.setattr(libvirt_hotplug, "POLL_SECONDS", 0.01)
    return made


def plugged(domain: Domain, affect: int) -> list[str]:
    return vifs.port_ids(domain.xml[affect])


LIVE, CONFIG = libvirt.VIR_DOMAIN_AFFECT_LIVE, libvirt.VIR_DOMAIN_AFFECT_CONFIG
UUID = "3a65870d-6b28-495a-8911-4b89418dd339"


def test_a_port_is_plugged_live_and_defined_once_then_unplugged(driver, domain) -> None:
    driver.attach_interface(UUID, VIF)
    driver.attach_interface(UUID, VIF)  # a job run again
    assert plugged(domain, LIVE) == plugged(domain, CONFIG) == [PORT]
    nic = ET.fromstring(domain.xml[LIVE]).find("devices/interface")
    assert nic is not None and ET.tostring(nic, encoding="unicode") == \
        vifs.interface_xml(vifs.Vif.from_dict(VIF))  # the build's XML
    driver.detach_interface(UUID, PORT)
    driver.detach_interface(UUID, PORT)  # done already: nothing
    assert plugged(domain, LIVE) == plugged(domain, CONFIG) == []


def test_a_stopped_guests_definition_only(driver, domain) -> None:
    domain.active = False
    driver.attach_interface(UUID, VIF)
    assert (plugged(domain, LIVE), plugged(domain, CONFIG)) == ([], [PORT])
    driver.detach_interface(UUID, PORT)
    assert plugged(domain, CONFIG) == []


def test_a_guest_slow_to_let_go_is_asked_again_and_one_that_never_does_fails(
        monkeypatch: pytest.MonkeyPatch, driver, domain) -> None:
    monkeypatch.setattr(libvirt_hotplug, "DETACH_RETRY_SECONDS", 0.02)
    driver.attach_interface(UUID, VIF)
    domain.holds = 2
    driver.detach_interface(UUID, PORT)
    assert plugged(domain, LIVE) == [] and domain.asked >= 3
    driver.attach_interface(UUID, VIF)
    domain.holds, domain.asked = 10**6, 0
    monkeypatch.setattr(libvirt_hotplug, "DETACH_SECONDS", 0.1)
    with pytest.raises(BuildError, match="did not let port .* go"):
        driver.detach_interface(UUID, PORT)


def test_a_hostile_vif_never_reaches_libvirt(driver, domain) -> None:
    for bad in ({**VIF, "port_id": "x'/><evil/>"}, {**VIF, "mac": "fa:16:3e:00:00:01'"},
                {**VIF, "bridge": "br int; rm"}):
        with pytest.raises(BuildError):
            driver.attach_interface(UUID, bad)
    assert plugged(domain, LIVE) == plugged(domain, CONFIG) == []


def test_no_domain_is_one_line(driver: LibvirtDriver) -> None:
    with pytest.raises(BuildError, match="has no domain"):
        driver.attach_interface("00000000-0000-0000-0000-00000000dead", VIF)

"""Domain XML and the driver against libvirt's test driver (test:///default); the XML
without libvirt is tested in tests/unit/virt/test_domain.py."""

from __future__ import annotations

import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

import libvirt
import pytest

from etcd_compute.drivers.libvirt import LibvirtDriver
from etcd_compute.errors import BuildError
from etcd_compute.mdserver.supervisor import ensure_mdserver
from etcd_compute.virt import domain
from tests import support
from tests.virt.conftest import guest_spec, new_uuid

libvirt.registerErrorHandler(lambda _context, _error: None, None)


def domain_spec(uuid: str, **overrides: Any) -> domain.DomainSpec:
    return support.domain_spec(uuid, **{"domain_type": "test", "network": "default",
                                        "bridge": "br-ext", **overrides})


def test_domain_xml_validates_and_carries_the_allocation() -> None:
    uuid = new_uuid()
    connection = libvirt.open("test:///default")
    try:
        defined = connection.defineXMLFlags(
            domain.domain_xml(domain_spec(uuid)), libvirt.VIR_DOMAIN_DEFINE_VALIDATE
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


def test_driver_with_the_test_uri(test_driver_config: dict[str, Any], tmp_path: Path) -> None:
    image = tmp_path / "image.qcow2"
    image.write_bytes(b"not downloaded with the test driver")
    driver = LibvirtDriver(test_driver_config)
    uuid = new_uuid()
    spec = guest_spec(uuid, f"file://{image}")
    assert "TEST" in driver.check()
    assert driver.build(spec) == {"ip": None}
    assert driver.build(spec) == {"ip": None}  # idempotent
    assert uuid in driver.list_instances()
    assert "test" not in driver.list_instances()
    instance_dir = Path(test_driver_config["compute"]["instances_dir"]) / uuid
    assert {p.name for p in instance_dir.iterdir()} == {"config.iso", "meta.json"}
    assert driver.console(uuid) == ""
    driver.destroy(uuid)
    driver.destroy(uuid)  # idempotent
    assert uuid not in driver.list_instances()
    assert not instance_dir.exists()
    assert ensure_mdserver(test_driver_config) is None  # no guests to serve
    driver.close()


def test_driver_missing_file_image_fails_cleanly(test_driver_config: dict[str, Any]) -> None:
    driver = LibvirtDriver(test_driver_config)
    uuid = new_uuid()
    with pytest.raises(BuildError, match="no such file"):
        driver.build(guest_spec(uuid, "file:///nonexistent/image.qcow2"))
    assert uuid not in driver.list_instances()
    assert not (Path(test_driver_config["compute"]["instances_dir"]) / uuid).exists()


def test_driver_reports_an_unreachable_hypervisor(test_driver_config: dict[str, Any]) -> None:
    from etcd_compute.errors import ServiceUnavailable

    test_driver_config["driver"]["libvirt"]["uri"] = "qemu+unix:///system?socket=/nonexistent"
    with pytest.raises(ServiceUnavailable, match="libvirt"):
        LibvirtDriver(test_driver_config).check()


@pytest.mark.parametrize("missing", ["VCPU", "MEMORY_MB", "DISK_GB"])
def test_a_spec_without_what_the_driver_needs_is_the_requests_fault(
    test_driver_config: dict[str, Any], tmp_path: Path, missing: str
) -> None:
    """Once `resources=VCPU:1,DISK_GB:1` reached the driver and raised KeyError there."""
    from etcd_compute.errors import RequestError

    image = tmp_path / "image.qcow2"
    image.write_bytes(b"not downloaded with the test driver")
    driver = LibvirtDriver(test_driver_config)
    uuid = new_uuid()
    spec = guest_spec(uuid, f"file://{image}")
    del spec["resources"][missing]
    with pytest.raises(RequestError, match=f"the request claims no {missing}"):
        driver.build(spec)
    assert uuid not in driver.list_instances()
    assert not (Path(test_driver_config["compute"]["instances_dir"]) / uuid).exists()
    driver.close()

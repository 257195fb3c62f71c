"""The libvirt driver's stop, start, reboot, resize and rebuild against libvirt's test driver
(test:///default): the real libvirt API, no guest. Real guests: test_lifecycle_vm.py."""

from __future__ import annotations

import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

import libvirt
import pytest

from etcd_compute.drivers.libvirt import LibvirtDriver
from etcd_compute.errors import BuildError, RequestError
from etcd_compute.virt import configdrive, domain
from tests.virt.conftest import guest_spec, new_uuid

libvirt.registerErrorHandler(lambda _context, _error: None, None)


@pytest.fixture
def built(test_driver_config: dict[str, Any], tmp_path: Path):
    image = tmp_path / "image.qcow2"
    image.write_bytes(b"not downloaded with the test driver")
    driver = LibvirtDriver(test_driver_config)
    spec = guest_spec(new_uuid(), f"file://{image}")
    driver.build(spec)
    yield driver, spec
    driver.destroy(spec["uuid"])
    driver.close()


def active(driver: LibvirtDriver, uuid: str) -> bool:
    return bool(driver.connection.lookupByName(uuid).isActive())


def identity(driver: LibvirtDriver, uuid: str) -> tuple[str | None, ...]:
    """What a resize or rebuild keeps: the domain's uuid, title, disks and console log (and
    its MAC, on a real network: see test_lifecycle_vm.py)."""
    root = ET.fromstring(driver.connection.lookupByName(uuid).XMLDesc(0))
    return (root.findtext("uuid"), root.findtext("title"),
            *(d.find("source").get("file") for d in root.iterfind("devices/disk")),
            root.find("devices/serial/log").get("file"))


def test_stop_start_and_reboot_soft_and_hard(built):
    driver, spec = built
    uuid = spec["uuid"]
    driver.stop(uuid)
    assert not active(driver, uuid) and uuid not in driver.running()
    driver.stop(uuid)  # again: nothing to do
    assert driver.start(uuid) == {"ip": None}
    assert active(driver, uuid)
    driver.start(uuid)  # again: nothing to do
    for hard in (False, True):
        assert driver.reboot(uuid, hard) == {"ip": None}
        assert active(driver, uuid)


def test_actions_on_an_instance_that_is_not_here_fail_in_one_line(test_driver_config):
    driver = LibvirtDriver(test_driver_config)
    uuid = new_uuid()
    for call in (lambda: driver.stop(uuid), lambda: driver.start(uuid),
                 lambda: driver.reboot(uuid, False)):
        with pytest.raises(BuildError, match=f"instance {uuid} has no domain on this host"):
            call()
    driver.close()


@pytest.mark.parametrize("power_on", [True, False])
def test_resize_redefines_memory_and_vcpus_and_keeps_the_rest(built, power_on):
    driver, spec = built
    uuid = spec["uuid"]
    before = identity(driver, uuid)
    driver.resize({**spec, "resources": {"VCPU": 3, "MEMORY_MB": 384, "DISK_GB": 1}},
                  power_on)
    assert domain.size_of(driver.connection.lookupByName(uuid)) == (384, 3)
    assert identity(driver, uuid) == before
    assert domain.is_ours(driver.connection.lookupByName(uuid))
    assert active(driver, uuid) is power_on


def test_a_resize_that_fails_puts_the_old_definition_back(built, monkeypatch):
    driver, spec = built
    uuid = spec["uuid"]
    connection = driver.connection
    real = connection.defineXMLFlags

    def refuse_the_new_one(xml: str, flags: int = 0):
        if ">5</vcpu>" in xml:
            raise libvirt.libvirtError("no room for 5 vCPUs (test)")
        return real(xml, flags)

    monkeypatch.setattr(connection, "defineXMLFlags", refuse_the_new_one)
    with pytest.raises(BuildError, match="resize: no room for 5 vCPUs"):
        driver.resize({**spec, "resources": {"VCPU": 5, "MEMORY_MB": 512, "DISK_GB": 1}},
                      True)
    assert domain.size_of(connection.lookupByName(uuid)) == (128, 1)
    assert active(driver, uuid)  # powered as it was asked to be


def test_a_resize_without_a_size_is_the_requests_fault(built):
    driver, spec = built
    with pytest.raises(RequestError, match="no MEMORY_MB"):
        driver.resize({**spec, "resources": {"VCPU": 2, "DISK_GB": 1}}, True)


def test_rebuild_keeps_the_domain_and_writes_the_same_identity(built, tmp_path):
    driver, spec = built
    uuid = spec["uuid"]
    files = Path(driver.instances_dir) / uuid
    before = identity(driver, uuid)
    (files / "config.iso").unlink()  # the new one is written whole
    new_image = tmp_path / "new.qcow2"
    new_image.write_bytes(b"another image")
    assert driver.rebuild({**spec, "image": {"url": f"file://{new_image}", "sha256": None}},
                          True) == {"ip": None}
    assert identity(driver, uuid) == before and active(driver, uuid)
    drive = configdrive.read_config_drive(files / "config.iso")
    assert f"instance-id: {uuid}" in drive["meta-data"]
    assert drive["user-data"] == spec["user_data"]
    driver.rebuild(spec, False)
    assert not active(driver, uuid)


def test_a_rebuild_from_a_missing_image_changes_nothing(built):
    driver, spec = built
    uuid = spec["uuid"]
    with pytest.raises(RequestError, match="no such file"):
        driver.rebuild({**spec, "image": {"url": "file:///no/such.qcow2", "sha256": None}},
                       True)
    assert active(driver, uuid)
    assert not (Path(driver.instances_dir) / uuid / "disk.rebuild.qcow2").exists()


def test_a_build_of_a_stopped_instance_defines_it_powered_off(test_driver_config, tmp_path):
    image = tmp_path / "image.qcow2"
    image.write_bytes(b"x")
    driver = LibvirtDriver(test_driver_config)
    spec = guest_spec(new_uuid(), f"file://{image}", stopped=True)
    try:
        assert driver.build(spec) == {"ip": None}
        assert spec["uuid"] in driver.list_instances() and not active(driver, spec["uuid"])
        assert driver.build(spec) == {"ip": None}  # again (a restart): still off
        assert not active(driver, spec["uuid"])
    finally:
        driver.destroy(spec["uuid"])
        driver.close()

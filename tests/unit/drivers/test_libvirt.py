"""drivers/libvirt.py against libvirt's test driver (test:///default, in-process: no libvirtd,
no guest, no download): builds are idempotent and leave nothing when they fail, domains not
ours are never touched, an operator's actions (stop, start, reboot, resize,
rebuild). Real guests: tests/virt/test_vm.py, tests/virt/test_lifecycle_vm.py."""

from __future__ import annotations

import uuid as uuidlib
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

import libvirt
import pytest

from etcd_compute.drivers.libvirt import LibvirtDriver
from etcd_compute.errors import BuildError, RequestError
from etcd_compute.virt import configdrive, domain
from tests.support import make_spec

RP = "00000000-0000-0000-0000-0000000000aa"


def spec_for(image: str, **extra: Any) -> dict[str, Any]:
    return make_spec(RP, image, **extra)


def instance_dir(config: dict[str, Any], uuid: str) -> Path:
    return Path(config["compute"]["instances_dir"]) / uuid


def test_driver_with_the_test_uri(test_driver_config: dict[str, Any], image: str) -> None:
    driver = LibvirtDriver(test_driver_config)
    spec = spec_for(image)
    uuid = spec["uuid"]
    assert "TEST" in driver.check()
    assert driver.build(spec) == {"ip": None}
    assert driver.build(spec) == {"ip": None}  # idempotent
    assert uuid in driver.list_instances()
    assert "test" not in driver.list_instances()
    assert {p.name for p in instance_dir(test_driver_config, uuid).iterdir()} == \
        {"config.iso", "meta.json"}
    assert driver.console(uuid) == ""
    driver.destroy(uuid)
    driver.destroy(uuid)  # idempotent
    assert uuid not in driver.list_instances()
    assert not instance_dir(test_driver_config, uuid).exists()
    driver.close()


def test_driver_missing_file_image_fails_cleanly(test_driver_config: dict[str, Any]) -> None:
    driver = LibvirtDriver(test_driver_config)
    spec = spec_for("file:///nonexistent/image.qcow2")
    with pytest.raises(BuildError, match="no such file"):
        driver.build(spec)
    assert spec["uuid"] not in driver.list_instances()
    assert not instance_dir(test_driver_config, spec["uuid"]).exists()


@pytest.mark.parametrize("missing", ["VCPU", "MEMORY_MB", "DISK_GB"])
def test_a_spec_without_what_the_driver_needs_is_the_requests_fault(
    test_driver_config: dict[str, Any], image: str, missing: str
) -> None:
    """Once `resources=VCPU:1,DISK_GB:1` reached the driver and raised KeyError there."""
    driver = LibvirtDriver(test_driver_config)
    spec = spec_for(image)
    del spec["resources"][missing]
    with pytest.raises(RequestError, match=f"the request claims no {missing}"):
        driver.build(spec)
    assert spec["uuid"] not in driver.list_instances()
    assert not instance_dir(test_driver_config, spec["uuid"]).exists()
    driver.close()


def test_a_build_libvirt_refuses_is_one_bounded_line_and_leaves_nothing(
        driver, test_driver_config, image):
    spec = spec_for(image, resources={"VCPU": 100000, "MEMORY_MB": 128, "DISK_GB": 1})
    with pytest.raises(BuildError) as caught:
        driver.build(spec)
    message = str(caught.value)
    assert type(caught.value) is BuildError and "\n" not in message and len(message) <= 1000
    assert spec["uuid"] not in driver.list_instances()
    assert not instance_dir(test_driver_config, spec["uuid"]).exists()


def test_an_unexpected_fault_becomes_the_first_line_of_its_reason_bounded(driver, image,
                                                                          monkeypatch):
    def fails(_spec: dict[str, Any]) -> None:
        raise ValueError("x" * 5000 + "\nTraceback-like second line")

    monkeypatch.setattr(driver, "_build_new", fails)
    with pytest.raises(BuildError) as caught:
        driver.build(spec_for(image))
    assert str(caught.value) == "x" * 1000


def test_a_stopped_instance_is_started_again_by_a_repeated_build(driver, image):
    spec = spec_for(image)
    driver.build(spec)
    assert driver.power_off(spec["uuid"])
    assert driver.build(spec) == {"ip": None}  # a job repeated after a restart
    assert spec["uuid"] in driver.running()


@pytest.fixture
def foreign(driver):
    """A domain named like an instance of ours that someone else defined."""
    name = str(uuidlib.uuid4())
    domain = driver.connection.defineXML(
        f"<domain type='test'><name>{name}</name><memory>1024</memory>"
        "<os><type>hvm</type></os></domain>")
    domain.create()
    yield name
    domain.destroy()
    domain.undefine()


def test_a_domain_not_ours_is_never_built_over_stopped_or_removed(driver, image, foreign):
    with pytest.raises(BuildError, match=f"a domain named {foreign} exists but is not one of "
                                         "ours"):
        driver.build(spec_for(image, uuid=foreign))
    with pytest.raises(BuildError, match="not one of ours"):
        driver.power_off(foreign)
    driver.destroy(foreign)
    assert driver.connection.lookupByName(foreign).isActive()
    assert foreign not in driver.list_instances() and foreign not in driver.running()
    assert driver.fence() == []


def test_libvirt_errors_are_not_printed_to_stderr(capfd):
    """libvirt prints every error by default; the driver raises them instead."""
    connection = libvirt.open("test:///default")
    try:
        with pytest.raises(libvirt.libvirtError):
            connection.lookupByName("no-such-domain")
    finally:
        connection.close()
    assert capfd.readouterr().err == ""


# -- an operator's actions ------------------------------------------------------------------

SMALL = {"VCPU": 1, "MEMORY_MB": 128, "DISK_GB": 1}


@pytest.fixture
def built(driver: LibvirtDriver, image: str) -> tuple[LibvirtDriver, dict[str, Any]]:
    spec = spec_for(image, resources=dict(SMALL), user_data="user-data\nsecond line")
    driver.build(spec)
    return driver, spec


def active(driver: LibvirtDriver, uuid: str) -> bool:
    return bool(driver.connection.lookupByName(uuid).isActive())


def identity(driver: LibvirtDriver, uuid: str) -> tuple[str | None, ...]:
    """What a resize or rebuild keeps: the domain's uuid, title, disks and console log (and
    its MAC, on a real network: see tests/virt/test_lifecycle_vm.py)."""
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


def test_suspend_is_a_managed_save_that_resume_restores_and_destroy_removes(built):
    driver, spec = built
    uuid = spec["uuid"]
    driver.suspend(uuid)
    found = driver.connection.lookupByName(uuid)
    assert not found.isActive() and found.hasManagedSaveImage(0)
    assert uuid not in driver.running()
    driver.suspend(uuid)  # again (run after a restart): its image is there, nothing to do
    assert driver.resume(uuid) == {"ip": None}
    assert active(driver, uuid) and not found.hasManagedSaveImage(0)
    driver.resume(uuid)  # again: running, nothing to do
    driver.suspend(uuid)
    driver.destroy(uuid)  # the managed-save image goes with the domain
    assert uuid not in driver.list_instances()


def test_a_stopped_guest_cannot_be_suspended(built):
    driver, spec = built
    driver.stop(spec["uuid"])
    with pytest.raises(BuildError, match="^suspend: the guest is not running$"):
        driver.suspend(spec["uuid"])
    assert not driver.connection.lookupByName(spec["uuid"]).hasManagedSaveImage(0)


def test_pause_suspends_the_domain_in_memory_and_unpause_resumes_it(built):
    driver, spec = built
    uuid = spec["uuid"]
    found = driver.connection.lookupByName(uuid)
    driver.pause(uuid)
    # libvirt's PAUSED: still active (its memory in qemu), nothing saved to disk.
    assert found.state()[0] == libvirt.VIR_DOMAIN_PAUSED and found.isActive()
    assert not found.hasManagedSaveImage(0) and uuid in driver.running()
    driver.pause(uuid)  # again (run after a restart): paused already, nothing to do
    assert driver.unpause(uuid) == {"ip": None}
    assert found.state()[0] == libvirt.VIR_DOMAIN_RUNNING
    driver.unpause(uuid)  # again: running, nothing to do
    assert found.state()[0] == libvirt.VIR_DOMAIN_RUNNING


def test_a_paused_guest_is_rebooted_hard_even_when_asked_soft(built):
    driver, spec = built
    uuid = spec["uuid"]
    driver.pause(uuid)
    asked: list[str] = []
    real = driver._shut_down
    driver._shut_down = lambda domain: asked.append(domain.name()) or real(domain)
    assert driver.reboot(uuid, False) == {"ip": None}
    assert asked == []  # never asked over ACPI: it could not answer
    assert driver.connection.lookupByName(uuid).state()[0] == libvirt.VIR_DOMAIN_RUNNING


def test_a_stopped_guest_cannot_be_paused_nor_unpaused(built):
    driver, spec = built
    driver.stop(spec["uuid"])
    with pytest.raises(BuildError, match="^pause: the guest is not running$"):
        driver.pause(spec["uuid"])
    with pytest.raises(BuildError, match=r"^unpause: the guest is not running \(its memory"):
        driver.unpause(spec["uuid"])


def test_actions_on_an_instance_that_is_not_here_fail_in_one_line(driver):
    uuid = str(uuidlib.uuid4())
    for call in (lambda: driver.stop(uuid), lambda: driver.start(uuid),
                 lambda: driver.suspend(uuid), lambda: driver.resume(uuid),
                 lambda: driver.pause(uuid), lambda: driver.unpause(uuid),
                 lambda: driver.reboot(uuid, False)):
        with pytest.raises(BuildError, match=f"instance {uuid} has no domain on this host"):
            call()


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


def test_a_build_of_a_stopped_instance_defines_it_powered_off(driver, image):
    spec = spec_for(image, stopped=True)
    assert driver.build(spec) == {"ip": None}
    assert spec["uuid"] in driver.list_instances() and not active(driver, spec["uuid"])
    assert driver.build(spec) == {"ip": None}  # again (a restart): still off
    assert not active(driver, spec["uuid"])


# -- prefetch: the image into the cache while the claim is checked, nothing of the guest ----


def count_fetches(driver: LibvirtDriver, monkeypatch: pytest.MonkeyPatch) -> list[tuple[Any, ...]]:
    """The image cache's fetches from now on, as if the driver had a real hypervisor."""
    seen: list[tuple[Any, ...]] = []
    monkeypatch.setattr(type(driver), "is_test_driver", property(lambda _self: False))
    monkeypatch.setattr(driver.images, "fetch",
                        lambda url, sha256=None, max_virtual_size=None:
                        seen.append((url, sha256, max_virtual_size)))
    return seen


def test_prefetch_fetches_the_image_within_the_claimed_disk_and_defines_nothing(
        driver, monkeypatch, test_driver_config):
    fetches = count_fetches(driver, monkeypatch)
    spec = spec_for("https://example.invalid/i.qcow2",
                    resources={"VCPU": 1, "MEMORY_MB": 64, "DISK_GB": 3})
    spec["image"]["sha256"] = "ab" * 32
    driver.prefetch(spec)
    assert fetches == [("https://example.invalid/i.qcow2", "ab" * 32, 3 * 2**30)]
    assert spec["uuid"] not in driver.list_instances()
    assert not instance_dir(test_driver_config, spec["uuid"]).exists()


def test_prefetch_skips_what_a_build_would_not_fetch(driver, image, monkeypatch):
    built = spec_for(image)
    driver.build(built)
    fetches = count_fetches(driver, monkeypatch)
    driver.prefetch(built)  # already defined: a resumed build does not fetch either
    driver.prefetch(spec_for(image, resources={"VCPU": 1}))  # no disk: the build refuses it
    assert fetches == []


def test_prefetch_with_the_test_driver_fetches_nothing(driver, image, monkeypatch):
    monkeypatch.setattr(driver.images, "fetch", lambda *a, **k: pytest.fail("fetched"))
    driver.prefetch(spec_for(image))


# -- security groups: the NIC's filter swapped ----------------------------------------------

NIC_XML = ("<domain><devices><interface type='network'><mac address='52:54:00:12:34:56'/>"
           "<source network='etcd-compute'/>{target}<filterref filter='{name}'>"
           "<parameter name='CTRL_IP_LEARNING' value='dhcp'/></filterref></interface>"
           "</devices></domain>")


class FilteredDomain:
    """A domain with one filtered NIC, as libvirt shows it live (with its tap) and defined;
    `updateDeviceFlags` records what was asked and changes the view it affects."""

    def __init__(self, running: bool, name: str = "etcd-compute-guest"):
        self.running, self.live, self.config = running, name, name
        self.updates: list[tuple[str, int]] = []

    def isActive(self) -> bool:  # noqa: N802 (libvirt's names)
        return self.running

    def XMLDesc(self, flags: int) -> str:  # noqa: N802
        if flags & libvirt.VIR_DOMAIN_XML_INACTIVE or not self.running:
            return NIC_XML.format(target="", name=self.config)
        return NIC_XML.format(target="<target dev='vnet3'/>", name=self.live)

    def updateDeviceFlags(self, xml: str, flags: int) -> None:  # noqa: N802
        self.updates.append((xml, flags))
        name = ET.fromstring(xml).find("filterref").get("filter")
        if flags & libvirt.VIR_DOMAIN_AFFECT_LIVE:
            self.live = name
        if flags & libvirt.VIR_DOMAIN_AFFECT_CONFIG:
            self.config = name


@pytest.mark.parametrize("running", [True, False])
def test_security_groups_swap_the_running_guests_filter_and_its_definition(
        driver, monkeypatch, running):
    guest = FilteredDomain(running)
    monkeypatch.setattr(driver, "_domain", lambda uuid: guest)
    ensured: list[Any] = []
    monkeypatch.setattr(driver, "_ensure_filters", lambda groups=None: ensured.append(groups))
    spec = {"uuid": "0b7e4f1e-9a0c-4a51-8f0e-5d2c3b4a6e7f"}
    driver.set_security_groups(spec, [])
    assert (guest.live, guest.config) == (
        "etcd-compute-guest-isolated" if running else "etcd-compute-guest",
        "etcd-compute-guest-isolated")
    flags = [f for _, f in guest.updates]
    assert flags == ([libvirt.VIR_DOMAIN_AFFECT_LIVE] if running else []) + \
        [libvirt.VIR_DOMAIN_AFFECT_CONFIG]
    live_xml = guest.updates[0][0]
    assert ("vnet3" in live_xml) is running  # the live NIC as libvirt knows it
    assert ensured == [[]]  # the filter it names exists before the swap
    guest.updates.clear()
    driver.set_security_groups(spec, [])  # again (a job run after a restart): nothing
    assert guest.updates == []
    driver.set_security_groups(spec, ["default"])
    assert guest.config == "etcd-compute-guest"


def test_a_swap_libvirt_refuses_is_one_line_and_a_guest_without_a_nic_needs_none(
        driver, image, monkeypatch):
    guest = FilteredDomain(True)

    def refuse(xml: str, flags: int) -> None:
        raise libvirt.libvirtError("Operation not supported: cannot modify network device\n"
                                   "second line")

    guest.updateDeviceFlags = refuse  # type: ignore[method-assign]
    monkeypatch.setattr(driver, "_domain", lambda uuid: guest)
    monkeypatch.setattr(driver, "_ensure_filters", lambda groups=None: None)
    with pytest.raises(BuildError, match=r"^security-groups: .*cannot modify network device$"):
        driver.set_security_groups({"uuid": "0b7e4f1e-9a0c-4a51-8f0e-5d2c3b4a6e7f"}, [])
    monkeypatch.undo()
    spec = spec_for(image)  # the test driver builds no NIC: nothing to swap
    driver.build(spec)
    driver.set_security_groups(spec, [])


@pytest.mark.parametrize(("groups", "before"), [([], "etcd-compute-guest"),
                                                (["default"], "etcd-compute-guest-isolated")])
def test_a_swap_refused_half_way_puts_the_running_guests_filter_back(driver, monkeypatch,
                                                                     groups, before):
    """The running guest changed, its definition refused: both as they were (the record
    says the groups did not change)."""
    guest = FilteredDomain(True, name=before)
    update = guest.updateDeviceFlags

    def refuse_the_definition(xml: str, flags: int) -> None:
        if flags & libvirt.VIR_DOMAIN_AFFECT_CONFIG:
            raise libvirt.libvirtError("cannot write the definition (test)")
        update(xml, flags)

    guest.updateDeviceFlags = refuse_the_definition  # type: ignore[method-assign]
    monkeypatch.setattr(driver, "_domain", lambda uuid: guest)
    monkeypatch.setattr(driver, "_ensure_filters", lambda groups=None: None)
    with pytest.raises(BuildError, match="cannot write the definition"):
        driver.set_security_groups({"uuid": "0b7e4f1e-9a0c-4a51-8f0e-5d2c3b4a6e7f"}, groups)
    assert (guest.live, guest.config) == (before, before)
    assert len(guest.updates) == 2  # the live swap, then the live one put back

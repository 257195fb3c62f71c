"""Real guests under qemu:///system (TCG): boot, config drive, metadata, destroy."""

from __future__ import annotations

import hashlib
import os
import re
import stat
import subprocess
import time
import xml.etree.ElementTree as ET
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import libvirt
import pytest
import requests

from etcd_compute.drivers.libvirt import LibvirtDriver
from etcd_compute.errors import BuildError, RequestError
from etcd_compute.virt import network
from tests.support import wait_for
from tests.virt.conftest import guest_spec, new_uuid

pytestmark = pytest.mark.vm

MARKER = re.compile(r"^ETCD-COMPUTE-GUEST (\S+)(?: ([^\r\n]*))?", re.M)


def markers(console: str) -> list[str]:
    return [" ".join(filter(None, match.groups())) for match in MARKER.finditer(console)]


def finished_console(driver: LibvirtDriver, uuid: str) -> str | None:
    console = driver.console(uuid)
    return console if "ETCD-COMPUTE-GUEST ready" in console else None


def assert_gone(driver: LibvirtDriver, uuid: str) -> None:
    connection = libvirt.open(driver.settings["uri"])
    try:
        with pytest.raises(libvirt.libvirtError):
            connection.lookupByName(uuid)
    finally:
        connection.close()
    assert uuid not in driver.list_instances()
    assert not (Path(driver.config["compute"]["instances_dir"]) / uuid).exists()


def assert_private(instance_dir: Path, cache_dir: Path) -> None:
    """Tenant data and cached images: another local user can neither list nor read them,
    while qemu (libvirt-qemu) runs the guest from them."""
    for directory in (instance_dir, instance_dir.parent, cache_dir):
        assert stat.S_IMODE(directory.stat().st_mode) == 0o711, directory
    tenant_files = [instance_dir / n for n in ("disk.qcow2", "config.iso", "meta.json")]
    for path in [*tenant_files, *cache_dir.glob("*.qcow2"), *cache_dir.glob("*.json")]:
        assert stat.S_IMODE(path.stat().st_mode) & 0o077 == 0, path
    for path in [instance_dir, cache_dir, *tenant_files, instance_dir / "console.log"]:
        as_nobody = subprocess.run(
            ["setpriv", "--reuid=nobody", "--regid=nogroup", "--clear-groups",
             "cat" if path.is_file() else "ls", str(path)],
            capture_output=True, check=False)
        assert as_nobody.returncode != 0 and not as_nobody.stdout, path


def test_two_guests_boot_and_each_sees_only_its_own_data(
    vm_config: dict[str, Any], test_guest_image: Path
) -> None:
    uuids = [new_uuid(), new_uuid()]
    specs = {uuid: guest_spec(uuid, f"file://{test_guest_image}") for uuid in uuids}

    def build(uuid: str) -> tuple[dict[str, Any], float]:
        driver = LibvirtDriver(vm_config)
        started = time.monotonic()
        try:
            return driver.build(specs[uuid]), time.monotonic() - started
        finally:
            driver.close()

    driver = LibvirtDriver(vm_config)
    try:
        with ThreadPoolExecutor(2) as pool:
            results = dict(zip(uuids, pool.map(build, uuids), strict=True))
        for uuid, (result, seconds) in results.items():
            print(f"{uuid}: ip {result['ip']} after {seconds:.1f}s")
            assert re.fullmatch(r"192\.168\.124\.\d+", result["ip"])
        assert driver.list_instances() >= set(uuids)
        # A repeated build (daemon restart) returns the same instance.
        assert driver.build(specs[uuids[0]])["ip"] == results[uuids[0]][0]["ip"]

        for uuid in uuids:
            other = next(u for u in uuids if u != uuid)
            console = wait_for(
                lambda uuid=uuid: finished_console(driver, uuid),
                timeout=60, interval=0.5, what=f"{uuid} to print its markers",
            )
            lines = markers(console)
            first_line = f"user-data-of-{uuid}"
            for source in ("configdrive", "metadata"):
                assert f"{source} instance-id={uuid}" in lines, console
                assert f"{source} user-data={first_line}" in lines, console
            assert other not in console
            files = Path(vm_config["compute"]["instances_dir"]) / uuid
            assert {p.name for p in files.iterdir()} >= {
                "disk.qcow2", "config.iso", "console.log", "meta.json"
            }
            assert_private(files, driver.images.cache_dir)

        # Each NIC carries our filter, bound to the lease from the gateway.
        for uuid in uuids:
            nic = ET.fromstring(driver.connection.lookupByName(uuid).XMLDesc(0)).find(
                "devices/interface/filterref")
            assert nic is not None and nic.get("filter") == "etcd-compute-guest"
            parameters = {p.get("name"): p.get("value") for p in nic.iterfind("parameter")}
            assert parameters == {"CTRL_IP_LEARNING": "dhcp", "DHCPSERVER": "192.168.124.1"}

        # The host is not a guest: the metadata server tells it nothing.
        answer = requests.get(
            f"http://{network.METADATA_ADDRESS}/latest/meta-data/instance-id", timeout=5
        )
        assert answer.status_code == 404

        for uuid in uuids:
            started = time.monotonic()
            driver.destroy(uuid)
            print(f"{uuid}: destroyed in {time.monotonic() - started:.1f}s")
            assert_gone(driver, uuid)
        driver.destroy(uuids[0])  # idempotent
    finally:
        for uuid in uuids:
            driver.destroy(uuid)
        driver.close()


def test_bad_image_url_fails_and_leaves_nothing(vm_config: dict[str, Any]) -> None:
    driver = LibvirtDriver(vm_config)
    uuid = new_uuid()
    with pytest.raises(BuildError, match="no such file|No such file"):
        driver.build(guest_spec(uuid, f"file://{allowed_dir(vm_config)}/missing.qcow2"))
    assert_gone(driver, uuid)
    driver.close()


def test_refused_images_fail_before_anything_runs_and_leave_nothing(
    vm_config: dict[str, Any],
) -> None:
    """A host file, and a 200 KB qcow2 declaring 16 TiB for a 1 GiB claim: one RequestError
    line each, no domain, no instance dir, nothing in the cache."""
    root = Path(vm_config["driver"]["libvirt"]["image_cache_dir"]).parent
    huge = root / "huge.qcow2"
    subprocess.run(["qemu-img", "create", "-q", "-f", "qcow2", str(huge), "16T"], check=True)
    driver = LibvirtDriver(vm_config)
    cache = driver.images.cache_dir

    def cached() -> set[str]:  # other tests' images stay; these add nothing
        return {p.name for p in cache.iterdir() if p.suffix != ".lock"} if cache.exists() else set()

    before = cached()
    for url, fault in [("file:///etc/shadow", "not under a directory allowed"),
                       (f"file://{huge}", "16384 GiB is larger than the 1 GiB disk")]:
        uuid = new_uuid()
        with pytest.raises(RequestError, match=fault):
            driver.build(guest_spec(uuid, url))
        assert_gone(driver, uuid)
        assert cached() == before
    driver.close()


def allowed_dir(vm_config: dict[str, Any]) -> Path:
    """A directory file:// images may come from in these tests."""
    return Path(vm_config["driver"]["libvirt"]["image_cache_dir"]).parent


def test_checksum_mismatch_fails_and_leaves_nothing(
    vm_config: dict[str, Any], test_guest_image: Path
) -> None:
    # A private copy, so this is a real download and not a hit in the cache.
    copy = Path(vm_config["driver"]["libvirt"]["image_cache_dir"]).parent / "copy.qcow2"
    copy.write_bytes(test_guest_image.read_bytes())
    wrong = hashlib.sha256(b"something else").hexdigest()
    driver = LibvirtDriver(vm_config)
    uuid = new_uuid()
    spec = guest_spec(uuid, f"file://{copy}")
    spec["image"]["sha256"] = wrong
    with pytest.raises(BuildError, match=f"expected {wrong}"):
        driver.build(spec)
    assert_gone(driver, uuid)
    assert not driver.images.base_path(spec["image"]["url"]).exists()
    driver.close()


def test_unbootable_image_fails_and_leaves_nothing(
    vm_config: dict[str, Any], tmp_path: Path
) -> None:
    junk = Path(vm_config["driver"]["libvirt"]["image_cache_dir"]).parent / "junk.img"
    junk.write_bytes(os.urandom(1024 * 1024))
    config = {**vm_config, "driver": {**vm_config["driver"]}}
    config["driver"]["libvirt"] = {**vm_config["driver"]["libvirt"], "boot_timeout_seconds": 20}
    driver = LibvirtDriver(config)
    uuid = new_uuid()
    started = time.monotonic()
    with pytest.raises(BuildError, match="no DHCP lease within 20s"):
        driver.build(guest_spec(uuid, f"file://{junk}"))
    assert time.monotonic() - started < 40
    assert_gone(driver, uuid)
    driver.close()


def test_a_guest_without_a_network_boots_with_no_interface_and_reports_its_figures(
    vm_config: dict[str, Any], test_guest_image: Path
) -> None:
    """The compute API's networks none: no NIC, no address; its diagnostics from libvirt."""
    from etcd_compute import messages

    uuid = new_uuid()
    driver = LibvirtDriver(vm_config)
    try:
        assert driver.build({**guest_spec(uuid, f"file://{test_guest_image}"),
                             "network": False}) == {"ip": None}
        connection = libvirt.open(driver.settings["uri"])
        try:
            domain = connection.lookupByName(uuid)
            assert domain.isActive()
            assert ET.fromstring(domain.XMLDesc(0)).findall("devices/interface") == []
        finally:
            connection.close()
        found = driver.diagnostics(uuid)
        assert found is not None
        assert (found["state"], found["num_nics"], found["nic_details"]) == ("running", 0, [])
        assert found["num_disks"] >= 1 and found["cpu_details"][0]["time"] is not None
        messages.check(messages.CONSOLE, {"uuid": uuid, "text": "", "updated_at": 1.0,
                                          "diagnostics": found})
        assert driver.reboot(uuid, hard=True) == {"ip": None}
    finally:
        driver.destroy(uuid)
        driver.close()
    assert_gone(driver, uuid)

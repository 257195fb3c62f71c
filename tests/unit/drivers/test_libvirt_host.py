"""drivers/libvirt_host.py against libvirt's test driver: the connection (reopened when
libvirtd went away, an unreachable one in one line), our domains powered off and on (a
fence touches ours only), the image limits from the settings."""

from __future__ import annotations

import uuid as uuidlib
from typing import Any

import libvirt
import pytest

from etcd_compute.drivers.libvirt import LibvirtDriver
from etcd_compute.drivers.libvirt_host import GIB, source_policy
from etcd_compute.errors import ServiceUnavailable
from tests.unit.drivers.test_libvirt import spec_for


def test_driver_reports_an_unreachable_hypervisor(test_driver_config: dict[str, Any]) -> None:
    test_driver_config["driver"]["libvirt"]["uri"] = "qemu+unix:///system?socket=/nonexistent"
    with pytest.raises(ServiceUnavailable, match="libvirt"):
        LibvirtDriver(test_driver_config).check()


def test_power_off_and_on_keep_the_definition(driver, image):
    uuid = driver.build(spec_for(image)) and next(iter(driver.list_instances()))
    assert uuid in driver.running()
    assert driver.power_off(uuid) is True
    assert driver.power_off(uuid) is False  # not running
    assert uuid not in driver.running() and uuid in driver.list_instances()
    assert driver.power_on(uuid) is True
    assert driver.power_on(uuid) is False  # running already
    assert driver.power_off(str(uuidlib.uuid4())) is False  # unknown
    assert driver.power_on(str(uuidlib.uuid4())) is False


def test_a_fence_stops_our_guests_only(driver, image):
    ours = [driver.build(spec) and spec["uuid"] for spec in (spec_for(image), spec_for(image))]
    assert driver.fence() == sorted(ours)
    assert driver.running() == set()
    assert driver.connection.lookupByName("test").isActive()  # the test driver's own domain


class GoneConnection:
    """A connection to a libvirtd that went away."""

    def isAlive(self) -> bool:  # noqa: N802 (libvirt's name)
        return False


def test_the_connection_is_opened_again_when_libvirtd_went_away(driver, image):
    spec = spec_for(image)
    driver.build(spec)
    # The test driver forgets its domains when its last connection closes: keep one open.
    keeper = libvirt.open("test:///default")
    try:
        driver.close()
        driver._connection = GoneConnection()
        assert driver.list_instances() == {spec["uuid"]}
    finally:
        keeper.close()


def test_image_limits_come_from_the_driver_settings():
    settings = {"image_file_dirs": ["/srv/images"], "image_max_gb": 1.5,
                "image_download_timeout_seconds": 30}
    policy = source_policy(settings)
    assert (policy.file_dirs, policy.max_bytes, policy.deadline_seconds) == \
        (("/srv/images",), int(1.5 * GIB), 30.0)

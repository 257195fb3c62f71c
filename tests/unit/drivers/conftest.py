"""The libvirt driver over libvirt's test driver (test:///default, in-process), for
test_libvirt.py, test_libvirt_host.py and the migration tests (which add a guest being
moved, `moving`, from migration_world.py)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from etcd_compute.config import deep_merge
from etcd_compute.defaults import COMPUTE_DEFAULTS
from etcd_compute.drivers.libvirt import LibvirtDriver


@pytest.fixture
def test_driver_config(tmp_path: Path) -> dict[str, Any]:
    return deep_merge(COMPUTE_DEFAULTS, {
        "compute": {"state_dir": str(tmp_path / "state"),
                    "instances_dir": str(tmp_path / "instances")},
        "driver": {"name": "libvirt",
                   "libvirt": {"uri": "test:///default",
                               "image_cache_dir": str(tmp_path / "images"),
                               # Only the migration tests read it: where peers reach us.
                               "migration": {"address": "10.0.0.1",
                                             "pki_dir": str(tmp_path / "pki")}}},
    })


@pytest.fixture
def driver(test_driver_config: dict[str, Any]):
    driver = LibvirtDriver(test_driver_config)
    yield driver
    for uuid in driver.list_instances():
        driver.destroy(uuid)
    driver.close()


@pytest.fixture
def image(tmp_path: Path) -> str:
    path = tmp_path / "image.qcow2"
    path.write_bytes(b"not downloaded with the test driver")
    return f"file://{path}"


from tests.unit.drivers.migration_world import moving  # noqa: E402, F401 (a fixture)

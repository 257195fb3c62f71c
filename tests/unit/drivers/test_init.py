"""drivers/__init__.py: `load_driver` gives the driver the configuration names, imports a driver
only when it is the one chosen, and names an unknown one."""

from __future__ import annotations

import importlib
import sys
from pathlib import Path
from typing import Any

import pytest

import etcd_compute.drivers
from etcd_compute.config import deep_merge
from etcd_compute.defaults import COMPUTE_DEFAULTS
from etcd_compute.drivers import Driver, load_driver
from etcd_compute.drivers.fake import FakeDriver
from etcd_compute.drivers.libvirt import LibvirtDriver


def config_for(tmp_path: Path, name: str) -> dict[str, Any]:
    return deep_merge(COMPUTE_DEFAULTS, {
        "compute": {"state_dir": str(tmp_path / "state"),
                    "instances_dir": str(tmp_path / "instances")},
        "driver": {"name": name, "libvirt": {"uri": "test:///default",
                                             "image_cache_dir": str(tmp_path / "images")}},
    })


@pytest.mark.parametrize(("name", "kind"), [("fake", FakeDriver), ("libvirt", LibvirtDriver)])
def test_the_driver_named_in_the_configuration(tmp_path, name, kind):
    driver = load_driver(config_for(tmp_path, name))
    assert type(driver) is kind and isinstance(driver, Driver)
    driver.close()


def test_the_libvirt_driver_is_imported_only_when_chosen(tmp_path, monkeypatch):
    # A fresh import of the package; the modules of this run are put back after.
    for name in ("etcd_compute.drivers", "etcd_compute.drivers.libvirt"):
        monkeypatch.delitem(sys.modules, name)
    monkeypatch.setattr(etcd_compute, "drivers", etcd_compute.drivers)
    fresh = importlib.import_module("etcd_compute.drivers")
    fresh.load_driver(config_for(tmp_path, "fake")).close()
    assert "etcd_compute.drivers.libvirt" not in sys.modules
    fresh.load_driver(config_for(tmp_path, "libvirt")).close()
    assert "etcd_compute.drivers.libvirt" in sys.modules


@pytest.mark.parametrize("name", ["xen", "Fake", "", "base"])
def test_an_unknown_driver_is_named(tmp_path, name):
    with pytest.raises(ValueError, match=f"^unknown driver '{name}'$"):
        load_driver(config_for(tmp_path, name))


def test_screens_come_only_from_a_real_libvirt(tmp_path):
    from etcd_compute.drivers import load_screens
    from etcd_compute.drivers.libvirt_screens import LibvirtScreens

    assert load_screens(config_for(tmp_path, "fake")) is None  # no VMs: no screens
    assert load_screens(config_for(tmp_path, "libvirt")) is None  # test:///: no qemu
    config = config_for(tmp_path, "libvirt")
    config["driver"]["libvirt"]["uri"] = "qemu:///system"
    screens = load_screens(config)
    assert isinstance(screens, LibvirtScreens) and screens.uri == "qemu:///system"

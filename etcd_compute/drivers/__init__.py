"""Hypervisor drivers: `fake` (no VMs) and `libvirt`; `load_driver` picks one by config."""

from __future__ import annotations

from typing import Any

from etcd_compute.drivers.base import Driver, PowerReport, PowerWatch, Screens

__all__ = ["Driver", "PowerReport", "PowerWatch", "Screens", "load_driver",
           "load_power_watch", "load_screens"]


def load_driver(config: dict[str, Any]) -> Driver:
    """The driver named in `config["driver"]["name"]` (imported only when chosen)."""
    name = config["driver"]["name"]
    if name == "fake":
        from etcd_compute.drivers.fake import FakeDriver

        return FakeDriver(config)
    if name == "libvirt":
        from etcd_compute.drivers.libvirt import LibvirtDriver

        return LibvirtDriver(config)
    raise ValueError(f"unknown driver {name!r}")


def load_power_watch(config: dict[str, Any]) -> PowerWatch | None:
    """The hypervisor's power events for this host, or None where there are none (the fake
    driver; libvirt's test driver, whose state is per process)."""
    if config["driver"]["name"] != "libvirt" or \
            config["driver"]["libvirt"]["uri"].startswith("test:"):
        return None
    from etcd_compute.drivers.libvirt_events import LibvirtPowerWatch

    return LibvirtPowerWatch(config["driver"]["libvirt"]["uri"])


def load_screens(config: dict[str, Any]) -> Screens | None:
    """The guests' screens for the console relay, or None where guests have none: the
    fake driver (no VMs, so no screen: it says so, and its host relays nothing), libvirt's
    test driver (no qemu)."""
    if config["driver"]["name"] != "libvirt" or \
            config["driver"]["libvirt"]["uri"].startswith("test:"):
        return None
    from etcd_compute.drivers.libvirt_screens import LibvirtScreens

    return LibvirtScreens(config["driver"]["libvirt"]["uri"])

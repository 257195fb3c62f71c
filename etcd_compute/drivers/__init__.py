"""Hypervisor drivers: `fake` (no VMs) and `libvirt`; `load_driver` picks one by config."""

from __future__ import annotations

from typing import Any

from etcd_compute.drivers.base import Driver, PowerReport, PowerWatch

__all__ = ["Driver", "PowerReport", "PowerWatch", "load_driver", "load_power_watch"]


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

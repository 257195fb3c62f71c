"""Hypervisor drivers: `fake` (no VMs) and `libvirt`; `load_driver` picks one by config."""

from __future__ import annotations

from typing import Any

from etcd_compute.drivers.base import Driver

__all__ = ["Driver", "load_driver"]


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

"""Hypervisor drivers: `fake` (no VMs) and `libvirt`."""

from etcd_compute.drivers.base import Driver, load_driver

__all__ = ["Driver", "load_driver"]

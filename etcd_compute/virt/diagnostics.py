"""A libvirt guest's figures in Nova's diagnostics shape (compute API 2.48), read as
Nova's libvirt driver reads them: the domain's state and vCPUs' times, its balloon's
memory, each disk's block stats and each NIC's interface stats (the domain's XML names
the devices). A figure libvirt cannot give is None, as Nova shows it."""

from __future__ import annotations

import xml.etree.ElementTree as ET
from typing import Any

import libvirt

_STATES = {libvirt.VIR_DOMAIN_RUNNING: "running", libvirt.VIR_DOMAIN_BLOCKED: "running",
           libvirt.VIR_DOMAIN_PAUSED: "paused", libvirt.VIR_DOMAIN_SHUTDOWN: "shutdown",
           libvirt.VIR_DOMAIN_SHUTOFF: "shutdown", libvirt.VIR_DOMAIN_CRASHED: "crashed",
           libvirt.VIR_DOMAIN_PMSUSPENDED: "suspended"}


def _or_none(call: Any) -> Any:
    try:
        return call()
    except libvirt.libvirtError:
        return None


def _figures(stats: Any, count: int) -> tuple[int | None, ...]:
    """libvirt's figures, None for one it does not give (-1: not supported, as a CD-ROM's
    error count)."""
    if not stats:
        return (None,) * count
    return tuple(value if isinstance(value, int) and value >= 0 else None for value in stats)


def of_domain(domain: libvirt.virDomain) -> dict[str, Any]:
    """Nova's 2.48 diagnostics of `domain` (`hypervisor`: its domain type, kvm or qemu);
    uptime is None: the compute API counts it from the instance's launch, as Nova."""
    state, max_kib, _mem_kib, vcpus, _cpu_ns = domain.info()
    root = ET.fromstring(domain.XMLDesc(0))
    running = state in (libvirt.VIR_DOMAIN_RUNNING, libvirt.VIR_DOMAIN_BLOCKED)
    cpus = _or_none(lambda: domain.vcpus()[0]) if running else None
    memory = _or_none(domain.memoryStats) if running else None
    used = None
    if memory and "available" in memory and "unused" in memory:
        used = (memory["available"] - memory["unused"]) // 1024
    disks = []
    for disk in root.iterfind("devices/disk"):
        target = disk.find("target")
        dev = target.get("dev") if target is not None else None
        stats = _or_none(lambda d=dev: domain.blockStats(d)) if running and dev else None
        read_req, read_bytes, write_req, write_bytes, errors = _figures(stats, 5)
        disks.append({"read_bytes": read_bytes, "read_requests": read_req,
                      "write_bytes": write_bytes, "write_requests": write_req,
                      "errors_count": errors})
    nics = []
    for nic in root.iterfind("devices/interface"):
        mac, target = nic.find("mac"), nic.find("target")
        dev = target.get("dev") if target is not None else None
        stats = _or_none(lambda d=dev: domain.interfaceStats(d)) if running and dev else None
        rx_b, rx_p, rx_e, rx_d, tx_b, tx_p, tx_e, tx_d = _figures(stats, 8)
        nics.append({"mac_address": mac.get("address") if mac is not None else None,
                     "rx_octets": rx_b, "rx_errors": rx_e, "rx_drop": rx_d,
                     "rx_packets": rx_p, "rx_rate": None, "tx_octets": tx_b,
                     "tx_errors": tx_e, "tx_drop": tx_d, "tx_packets": tx_p,
                     "tx_rate": None})
    return {
        "state": _STATES.get(state, "pending"), "driver": "libvirt",
        "hypervisor": root.get("type"), "hypervisor_os": "linux", "config_drive": True,
        "uptime": None,
        "num_cpus": vcpus, "num_nics": len(nics), "num_disks": len(disks),
        "memory_details": {"maximum": max_kib // 1024, "used": used},
        "cpu_details": [{"id": cpu[0], "time": cpu[2], "utilisation": None}
                        for cpu in cpus or []] or
                       [{"id": n, "time": None, "utilisation": None} for n in range(vcpus)],
        "nic_details": nics, "disk_details": disks,
    }

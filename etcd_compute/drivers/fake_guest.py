"""What a fake driver's guest shows: its diagnostics and its console (the fake driver,
`fake.py`, keeps its state; tests compare with these)."""

from __future__ import annotations

from typing import Any


def fake_diagnostics(instance: dict[str, Any]) -> dict[str, Any]:
    """A fake guest's diagnostics from its state, in Nova's 2.48 shape: its size, whether it
    runs, how long since it was built; counters are zero (it does nothing). `driver` is
    "libvirt" as Nova's own fake driver says (Nova's field takes only real drivers' names);
    `hypervisor` says what it is."""
    resources = instance.get("resources") or {}
    vcpus = int(resources.get("VCPU", 1))
    running = instance.get("running", True)
    nics = [{"mac_address": None, "rx_octets": 0, "rx_errors": 0, "rx_drop": 0,
             "rx_packets": 0, "rx_rate": None, "tx_octets": 0, "tx_errors": 0,
             "tx_drop": 0, "tx_packets": 0, "tx_rate": None}] \
        if instance.get("network", True) else []
    state = ("paused" if instance.get("paused") else "running") if running else "shutdown"
    return {"state": state, "driver": "libvirt",
            "hypervisor": "fake", "hypervisor_os": "fake", "config_drive": True,
            "uptime": None,  # the compute API counts it from the launch, as Nova
            "num_cpus": vcpus, "num_nics": len(nics), "num_disks": 1,
            "memory_details": {"maximum": int(resources.get("MEMORY_MB", 0)), "used": 0},
            "cpu_details": [{"id": n, "time": 0, "utilisation": None} for n in range(vcpus)],
            "nic_details": nics,
            "disk_details": [{"read_bytes": 0, "read_requests": 0, "write_bytes": 0,
                              "write_requests": 0, "errors_count": 0}]}


def boot_log(uuid: str) -> str:
    """A fake guest's console: a short boot log of several lines, as a real guest's
    serial console has (clients and Tempest read its tail), ending with the line that
    names the instance."""
    return (f"[    0.000000] Linux version 6.1.0-fake (fake driver)\n"
            f"[    0.010000] Command line: console=ttyS0\n"
            f"[    0.500000] Run /sbin/init as init process\n"
            f"Starting fake guest {uuid}...\n"
            f"fake login: \n"
            f"fake console of {uuid}: booted\n")

"""Our compute hosts as Nova shows its services, hypervisors and availability zones."""

from __future__ import annotations

import time
from typing import Any

from etcd_compute.api.objects.computes import DISK, RAM, VCPU, Compute
from etcd_compute.api.views.instance_actions import nova_time
from etcd_compute.api.wsgi import ApiRequest

BINARY = "nova-compute"


def compute_id(req: ApiRequest, compute: Compute) -> str | int:
    """A service's or hypervisor's id: the provider's uuid from 2.53, an integer before."""
    return compute.uuid if req.version.at_least("2.53") else compute.legacy_id


def service(req: ApiRequest, compute: Compute) -> dict[str, Any]:
    shown: dict[str, Any] = {
        "id": compute_id(req, compute), "binary": BINARY, "host": compute.name,
        "zone": compute.zone, "status": "disabled" if compute.disabled else "enabled",
        "state": "up" if compute.alive else "down", "updated_at": nova_time(compute.since),
        "disabled_reason": compute.reason if compute.disabled else None}
    if req.version.at_least("2.11"):
        shown["forced_down"] = False
    return shown


def hypervisor(req: ApiRequest, compute: Compute, detail: bool,
               servers: list[dict[str, Any]] | None = None,
               with_servers: bool = False) -> dict[str, Any]:
    shown: dict[str, Any] = {
        "id": compute_id(req, compute), "hypervisor_hostname": compute.name,
        "state": "up" if compute.alive else "down",
        "status": "disabled" if compute.disabled else "enabled"}
    if detail:
        shown.update({
            "hypervisor_type": "QEMU" if compute.driver in (None, "libvirt") else
            compute.driver, "hypervisor_version": 0, "host_ip": None,
            "service": {"id": compute_id(req, compute), "host": compute.name,
                        "disabled_reason": compute.reason if compute.disabled else None},
            "vcpus": compute.total(VCPU), "memory_mb": compute.total(RAM),
            "local_gb": compute.total(DISK), "vcpus_used": compute.used(VCPU),
            "memory_mb_used": compute.used(RAM), "local_gb_used": compute.used(DISK),
            "free_ram_mb": compute.free(RAM), "free_disk_gb": compute.free(DISK),
            "current_workload": 0, "running_vms": compute.instances,
            "disk_available_least": compute.free(DISK),
            "cpu_info": {} if req.version.at_least("2.28") else "{}"})
    if servers:
        shown["servers"] = servers
    elif with_servers and req.version.at_least("2.75"):
        shown["servers"] = []
    return shown


def uptime(compute: Compute, now: float) -> str:
    """The host's uptime as the `uptime` command begins it (what Nova's libvirt driver
    returns): the time, then how long since its machine started."""
    booted = now if compute.booted_at is None else float(compute.booted_at)
    seconds = max(0, int(now - booted))
    days, rest = divmod(seconds, 86400)
    clock = time.strftime("%H:%M:%S", time.gmtime(now))
    span = f"{rest // 3600:2d}:{rest % 3600 // 60:02d}"
    return f" {clock} up {days} day{'' if days == 1 else 's'}, {span}" if days else \
        f" {clock} up {span}"


def statistics(computes: list[Compute]) -> dict[str, int]:
    """Nova's sums over every hypervisor."""
    def total(value: Any) -> int:
        return sum(value(c) for c in computes)

    return {"count": len(computes), "vcpus": total(lambda c: c.total(VCPU)),
            "memory_mb": total(lambda c: c.total(RAM)),
            "local_gb": total(lambda c: c.total(DISK)),
            "vcpus_used": total(lambda c: c.used(VCPU)),
            "memory_mb_used": total(lambda c: c.used(RAM)),
            "local_gb_used": total(lambda c: c.used(DISK)),
            "free_ram_mb": total(lambda c: c.free(RAM)),
            "free_disk_gb": total(lambda c: c.free(DISK)), "current_workload": 0,
            "running_vms": total(lambda c: c.instances),
            "disk_available_least": total(lambda c: c.free(DISK))}


def zones(computes: list[Compute], detail: bool) -> list[dict[str, Any]]:
    """Nova's availability zones: one with an enabled service is available (its enabled
    services listed in detail: `available` up, `active` enabled), one with only
    disabled ones is not."""
    available: dict[str, list[Compute]] = {}
    for compute in computes:
        if not compute.disabled:
            available.setdefault(compute.zone, []).append(compute)
    unavailable = sorted({c.zone for c in computes} - set(available))
    shown = []
    for zone in sorted(available):
        hosts = None
        if detail:
            hosts = {c.name: {BINARY: {"available": c.alive, "active": True,
                                       "updated_at": nova_time(c.since)}}
                     for c in available[zone]}
        shown.append({"zoneName": zone, "zoneState": {"available": True}, "hosts": hosts})
    shown += [{"zoneName": zone, "zoneState": {"available": False}, "hosts": None}
              for zone in unavailable]
    return shown

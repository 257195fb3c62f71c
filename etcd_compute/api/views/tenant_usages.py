"""Tenant usages as Nova shows them (os-simple-tenant-usage)."""

from __future__ import annotations

from typing import Any

from etcd_compute.api.objects.tenant_usages import ServerUsage, TenantUsage
from etcd_compute.api.views.instance_actions import nova_time
from etcd_compute.api.views.servers import nova_states


def server_usage(used: ServerUsage) -> dict[str, Any]:
    return {"instance_id": used.uuid, "name": used.name, "hours": used.hours,
            "memory_mb": used.memory_mb, "local_gb": used.local_gb, "vcpus": used.vcpus,
            "tenant_id": used.project_id, "flavor": used.flavor,
            "started_at": nova_time(used.started_at), "ended_at": nova_time(used.ended_at),
            "state": "terminated" if used.ended_at is not None else
            nova_states(used.server)[0], "uptime": used.uptime}


def tenant_usage(usage: TenantUsage, start: float, stop: float,
                 detailed: bool) -> dict[str, Any]:
    shown: dict[str, Any] = {
        "tenant_id": usage.project_id, "total_local_gb_usage": usage.total("local_gb"),
        "total_vcpus_usage": usage.total("vcpus"),
        "total_memory_mb_usage": usage.total("memory_mb"),
        "total_hours": usage.total("hours"), "start": nova_time(start),
        "stop": nova_time(stop)}
    if detailed:
        shown["server_usages"] = [server_usage(s) for s in usage.servers]
    return shown

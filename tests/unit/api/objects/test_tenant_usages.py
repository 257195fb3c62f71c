"""A server's use within a period: from its launch to its end or the period's end."""

from __future__ import annotations

from etcd_compute.api.objects.servers import Server
from etcd_compute.api.objects.tenant_usages import TenantUsage, server_usage

FLAVOR = {"id": "1", "name": "m1", "vcpus": 2, "ram": 512, "disk": 1, "ephemeral": 1,
          "swap": 0}


def _server(state: str, launched: float | None, updated: float) -> Server:
    return Server({"uuid": "u", "project_id": "p", "user_id": "x", "name": "n",
                   "flavor": FLAVOR}, 1,
                  {"uuid": "u", "state": state, "launched_at": launched,
                   "updated_at": updated}, "rp")


def test_hours_within_the_period():
    used = server_usage(_server("ACTIVE", 3600.0, 3600.0), 0.0, 3 * 3600.0)
    assert used is not None and used.hours == 2.0 and used.local_gb == 2
    ended = server_usage(_server("DELETED", 3600.0, 7200.0), 0.0, 3 * 3600.0)
    assert ended is not None and ended.hours == 1.0 and ended.ended_at == 7200.0
    assert ended.uptime == 3600
    assert server_usage(_server("DELETED", 1.0, 2.0), 3600.0, 7200.0) is None
    assert server_usage(_server("BUILDING", None, 2.0), 0.0, 7200.0) is None
    total = TenantUsage("p", [used, ended])
    assert (total.total("hours"), total.total("vcpus"), total.total("memory_mb")) == (
        3.0, 6.0, 1536.0)

"""A tenant usage as Nova shows it: eight fields detailed, seven without its servers."""

from __future__ import annotations

from etcd_compute.api.objects.servers import Server
from etcd_compute.api.objects.tenant_usages import ServerUsage, TenantUsage
from etcd_compute.api.views import tenant_usages as view


def test_fields():
    server = Server({"uuid": "u"}, 1, {"uuid": "u", "state": "DELETED"}, "rp")
    used = ServerUsage("u", "n", "p", "m1", 1, 256, 1, 0.0, 3600.0, 1.0, server)
    shown = view.tenant_usage(TenantUsage("p", [used]), 0.0, 7200.0, detailed=True)
    assert len(shown) == 8 and shown["total_hours"] == 1.0
    assert shown["start"] == "1970-01-01T00:00:00.000000"
    (row,) = shown["server_usages"]
    assert (row["state"], row["ended_at"], row["uptime"]) == (
        "terminated", "1970-01-01T01:00:00.000000", 3600)
    assert len(view.tenant_usage(TenantUsage("p", [used]), 0.0, 1.0, detailed=False)) == 7

"""Migrations as Nova's os-migrations shows them, per microversion."""

from __future__ import annotations

from typing import Any

from etcd_compute.api.objects.migrations import Migration
from etcd_compute.api.views.instance_actions import nova_time
from etcd_compute.api.wsgi import ApiRequest


def migration(req: ApiRequest, found: Migration) -> dict[str, Any]:
    """Hosts are our host names (Nova's compute and node are one here; dest_host, an IP
    in Nova, is unknown: null); flavor ids are null (ours are strings)."""
    shown: dict[str, Any] = {
        "id": found.id, "status": found.status, "instance_uuid": found.instance_uuid,
        "source_compute": found.source_compute, "source_node": found.source_compute,
        "dest_compute": found.dest_compute, "dest_node": found.dest_compute,
        "dest_host": None, "old_instance_type_id": None, "new_instance_type_id": None,
        "created_at": nova_time(found.created_at), "updated_at": nova_time(found.updated_at)}
    if req.version.at_least("2.23"):
        shown["migration_type"] = found.migration_type
    if req.version.at_least("2.59"):
        shown["uuid"] = found.uuid
    if req.version.at_least("2.80"):
        shown["user_id"] = found.user_id
        shown["project_id"] = found.project_id
    return shown

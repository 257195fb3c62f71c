"""Host aggregates as Nova shows them (`_marshall_aggregate`)."""

from __future__ import annotations

from typing import Any

from etcd_compute.api.objects.aggregates import Aggregate
from etcd_compute.api.views.instance_actions import nova_time
from etcd_compute.api.wsgi import ApiRequest


def aggregate(req: ApiRequest, found: Aggregate, created: bool = False) -> dict[str, Any]:
    """The aggregate; a create's answer has no hosts and metadata (Nova's), 2.41 adds
    the uuid."""
    shown: dict[str, Any] = {
        "id": found.id, "name": found.name, "availability_zone": found.availability_zone,
        "created_at": nova_time(found.created_at), "updated_at": nova_time(found.updated_at),
        "deleted_at": None, "deleted": False}
    if not created:
        shown["hosts"] = list(found.hosts)
        shown["metadata"] = dict(found.metadata)
    if req.version.at_least("2.41"):
        shown["uuid"] = found.uuid
    return shown

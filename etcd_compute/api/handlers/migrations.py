"""/os-migrations (Nova's migrations controller, admins only): the migrations of every
server (objects/migrations.py), with Nova's filters (host, status, instance_uuid,
source_compute; 2.23 migration_type; 2.59 changes-since and limit/marker, a migration's
uuid, with a `next` link; 2.66 changes-before; 2.80 user_id and project_id)."""

from __future__ import annotations

from typing import Any

import webob

from etcd_compute.api import paging, policy, validation
from etcd_compute.api.backend import Backend
from etcd_compute.api.objects import migrations
from etcd_compute.api.objects.migrations import Migration
from etcd_compute.api.schemas import migrations as schema
from etcd_compute.api.views import migrations as view
from etcd_compute.api.wsgi import ApiRequest, Fault, Router, bad_request, json_response


def routes(router: Router, api: Backend) -> None:
    router.add("GET", "/os-migrations", lambda req: index(api, req))


def _filtered(req: ApiRequest, params: dict[str, list[str]],
              found: list[Migration]) -> list[Migration]:
    def wanted(name: str) -> str | None:
        return validation.single(params, name)

    if (host := wanted("host")) is not None:
        found = [m for m in found if host in (m.source_compute, m.dest_compute)]
    if (status := wanted("status")) is not None:
        found = [m for m in found if m.status == status]
    if (instance := wanted("instance_uuid")) is not None:
        found = [m for m in found if m.instance_uuid == instance]
    if (source := wanted("source_compute")) is not None:
        found = [m for m in found if m.source_compute == source]
    if req.version.at_least("2.23") and (kind := wanted("migration_type")) is not None:
        found = [m for m in found if m.migration_type == kind]
    if req.version.at_least("2.59") and (since := wanted("changes-since")) is not None:
        moment = validation.parse_time(since) or 0.0
        found = [m for m in found if (m.updated_at or m.created_at) >= moment]
    if req.version.at_least("2.66") and (before := wanted("changes-before")) is not None:
        moment = validation.parse_time(before) or 0.0
        found = [m for m in found if (m.updated_at or m.created_at) <= moment]
    if req.version.at_least("2.80"):
        if (user := wanted("user_id")) is not None:
            found = [m for m in found if m.user_id == user]
        if (project := wanted("project_id")) is not None:
            found = [m for m in found if m.project_id == project]
    return found


def index(api: Backend, req: ApiRequest) -> webob.Response:
    params = req.query()
    validation.query(schema.list_query_schema(req.version), params)
    api.policy.authorize(req.context, policy.MIGRATIONS, {})
    found = _filtered(req, params, migrations.every(api.store, api.servers))
    body: dict[str, Any] = {}
    if req.version.at_least("2.59"):
        limit, marker = paging.limit_and_marker(req, api.settings["max_limit"])
        try:
            found = paging.page(found, lambda m: m.uuid, limit, marker)
        except Fault:
            raise bad_request(f"Marker {str(marker)[:100]} could not be found.") from None
        links = paging.next_links(req, found, lambda m: m.uuid, "os-migrations",
                                  api.settings["max_limit"])
        if links:
            body["migrations_links"] = links
    return json_response({"migrations": [view.migration(req, m) for m in found], **body})

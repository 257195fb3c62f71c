"""/os-simple-tenant-usage[/{tenant_id}] (Nova's simple tenant usage controller): what
the projects' servers used over a period (`start`, `end`: Nova's time formats, now by
default), from our records (objects/tenant_usages.py). Listing every project's is for
admins; a project's readers see their own. From 2.40 both page over servers (limit,
marker: a server's uuid) with a `next` link, as Nova."""

from __future__ import annotations

import datetime
import time
from typing import Any

import webob

from etcd_compute.api import paging, policy, validation
from etcd_compute.api.backend import Backend
from etcd_compute.api.handlers.quota_sets import PROJECT
from etcd_compute.api.objects import tenant_usages
from etcd_compute.api.schemas import simple_tenant_usage as schema
from etcd_compute.api.views import tenant_usages as view
from etcd_compute.api.wsgi import (
    ApiRequest,
    Fault,
    Router,
    bad_request,
    json_response,
    not_found,
)

# The formats Nova's `_parse_datetime` takes (UTC).
TIME_FORMATS = ("%Y-%m-%dT%H:%M:%S", "%Y-%m-%dT%H:%M:%S.%f", "%Y-%m-%d %H:%M:%S.%f")


def routes(router: Router, api: Backend) -> None:
    router.add("GET", "/os-simple-tenant-usage", lambda req: index(api, req))
    router.add("GET", "/os-simple-tenant-usage/{tenant_id}",
               lambda req, tenant_id: show(api, req, tenant_id))


def parse_time(text: str | None) -> float:
    """A period's bound as Nova reads it: now when not given, 400 when malformed."""
    if not text:
        return time.time()
    for fmt in TIME_FORMATS:
        try:
            when = datetime.datetime.strptime(text, fmt)
        except ValueError:
            continue
        return when.replace(tzinfo=datetime.UTC).timestamp()
    raise bad_request("Invalid datetime string: Datetime is in invalid format")


def _period(params: dict[str, list[str]]) -> tuple[float, float]:
    start = parse_time(validation.single(params, "start"))
    stop = parse_time(validation.single(params, "end"))
    if not start < stop:
        raise bad_request("Invalid start time. The start time cannot occur after the end "
                          "time.")
    return start, stop


def _paged(api: Backend, req: ApiRequest, found: list[tenant_usages.TenantUsage],
           collection: str) -> tuple[list[tenant_usages.TenantUsage], list[dict[str, str]]]:
    """From 2.40: the servers after the marker, at most limit of them, and the next link."""
    if not req.version.at_least("2.40"):
        return found, []
    limit, marker = paging.limit_and_marker(req, api.settings["max_limit"])
    servers = [s for usage in found for s in usage.servers]
    try:
        shown = paging.page(servers, lambda s: s.uuid, limit, marker)
    except Fault:  # paging's 400 has Nova's words for servers lists
        raise bad_request(f"Marker {str(marker)[:100]} could not be found.") from None
    kept = {s.uuid for s in shown}
    paged = [tenant_usages.TenantUsage(u.project_id, [s for s in u.servers if s.uuid in kept])
             for u in found]
    links = paging.next_links(req, shown, lambda s: s.uuid, collection,
                              api.settings["max_limit"])
    return [u for u in paged if u.servers], links


def index(api: Backend, req: ApiRequest) -> webob.Response:
    if req.path_info.endswith("/"):  # Nova's route has no trailing slash (an empty id)
        raise not_found("The resource could not be found.")
    params = req.query()
    validation.query(schema.query_schema(req.version, index=True), params)
    api.policy.authorize(req.context, policy.SIMPLE_TENANT_USAGE % "list", {})
    start, stop = _period(params)
    detailed = validation.single(params, "detailed") == "1"
    found, links = _paged(api, req, tenant_usages.usages(api.servers, start, stop),
                          "os-simple-tenant-usage")
    body: dict[str, Any] = {"tenant_usages": [view.tenant_usage(u, start, stop, detailed)
                                              for u in found]}
    if links:
        body["tenant_usages_links"] = links
    return json_response(body)


def show(api: Backend, req: ApiRequest, tenant_id: str) -> webob.Response:
    params = req.query()
    validation.query(schema.query_schema(req.version, index=False), params)
    if not PROJECT.match(tenant_id):
        raise bad_request(f"Invalid project id {tenant_id[:100]}")
    api.policy.authorize(req.context, policy.SIMPLE_TENANT_USAGE % "show",
                         {"project_id": tenant_id})
    start, stop = _period(params)
    found, links = _paged(api, req, tenant_usages.usages(api.servers, start, stop, tenant_id),
                          f"os-simple-tenant-usage/{tenant_id}")
    body: dict[str, Any] = {"tenant_usage": view.tenant_usage(found[0], start, stop, True)
                            if found else {}}
    if links:
        body["tenant_usage_links"] = links
    return json_response(body)

"""/servers/{id}/os-instance-actions[/{request_id}] (Nova's instance actions controller):
what happened to a server, from its events (`objects/instance_actions.py`).

From 2.21 a deleted server's actions are listed too (while its record lives); from 2.51
every reader sees an action's events (their traceback, and from 2.62 their host, only
with the `events` rule: admins); 2.58 pages and filters by time.
"""

from __future__ import annotations

import webob

from etcd_compute.api import paging, policy, validation
from etcd_compute.api.backend import Backend
from etcd_compute.api.objects.instance_actions import actions_of
from etcd_compute.api.objects.servers import Server
from etcd_compute.api.schemas import instance_actions as schema
from etcd_compute.api.views import instance_actions as view
from etcd_compute.api.wsgi import ApiRequest, Router, bad_request, json_response, not_found


def routes(router: Router, api: Backend) -> None:
    router.add("GET", "/servers/{server_id}/os-instance-actions",
               lambda req, server_id: index(api, req, server_id))
    router.add("GET", "/servers/{server_id}/os-instance-actions/{request_id}",
               lambda req, server_id, request_id: show(api, req, server_id, request_id))


def _server(api: Backend, req: ApiRequest, server_id: str, rule: str) -> Server:
    server = api.servers.get(server_id, deleted=req.version.at_least("2.21"))
    if server is None or (server.project_id != req.context.project_id and
                          not req.context.is_admin):
        raise not_found(f"Instance {server_id[:100]} could not be found.")
    api.policy.authorize(req.context, policy.INSTANCE_ACTIONS % rule,
                         {"project_id": server.project_id})
    return server


def index(api: Backend, req: ApiRequest, server_id: str) -> webob.Response:
    validation.query(schema.index_query_schema(req.version), req.query())
    server = _server(api, req, server_id, "list")
    found = actions_of(api.store, server.uuid, server.host)
    body: dict = {}
    if req.version.at_least("2.58"):
        since = validation.single(req.query(), "changes-since")
        before = validation.single(req.query(), "changes-before")
        since_at = validation.parse_time(since) if since else None
        before_at = validation.parse_time(before) if before else None
        if since_at is not None and before_at is not None and before_at < since_at:
            raise bad_request("The value of changes-since must be less than or equal to "
                              "changes-before.")
        found = [a for a in found if (since_at is None or a.updated_at >= since_at) and
                 (before_at is None or a.updated_at <= before_at)]
        limit, marker = paging.limit_and_marker(req, api.settings["max_limit"])
        found = paging.page(found, lambda a: a.request_id, limit, marker)
        links = paging.next_links(req, found, lambda a: a.request_id,
                                  f"servers/{server.uuid}/os-instance-actions",
                                  api.settings["max_limit"])
        if links:
            body["links"] = links
    return json_response({"instanceActions": [view.action(req, a) for a in found], **body})


def show(api: Backend, req: ApiRequest, server_id: str, request_id: str) -> webob.Response:
    server = _server(api, req, server_id, "show")
    found = [a for a in actions_of(api.store, server.uuid, server.host)
             if a.request_id == request_id]
    if not found:
        raise not_found(f"Action {request_id[:100]} not found")
    shown = view.action(req, found[0])
    admin_view = api.policy.allows(req.context, policy.INSTANCE_ACTIONS % "events",
                                   {"project_id": server.project_id})
    if admin_view or req.version.at_least("2.51"):
        details = req.version.at_least("2.84") and api.policy.allows(
            req.context, policy.INSTANCE_ACTIONS % "events:details",
            {"project_id": server.project_id})
        shown["events"] = [view.event(req, found[0], server.project_id,
                                      traceback=admin_view,
                                      host=admin_view and req.version.at_least("2.62"),
                                      details=details)]
    return json_response({"instanceAction": shown})

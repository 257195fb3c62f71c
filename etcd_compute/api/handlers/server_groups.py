"""/os-server-groups (Nova's server groups controller): create, list, show, delete.

As Nova: a group is found in the caller's project only (admins: any), so another
project's is 404 as a missing one is (its existence is not told), then the policy rules
on its project; members are the live servers in it; before 2.64 the policy is a list of
one and an empty `metadata` is shown, from 2.64 `policy` and `rules`
(`max_server_per_host`, anti-affinity only); 2.13 names the owner.
"""

from __future__ import annotations

from typing import Any

import webob

from etcd_compute.api import policy, validation
from etcd_compute.api.backend import Backend
from etcd_compute.api.objects.server_groups import ServerGroup, TooManyGroups
from etcd_compute.api.schemas import server_groups as schema
from etcd_compute.api.wsgi import (
    ApiRequest,
    Fault,
    Router,
    bad_request,
    empty_response,
    json_response,
    not_found,
)

# The most a host may take of an anti-affinity group (the scheduler's bound).
MAX_PER_HOST = 1000


def routes(router: Router, api: Backend) -> None:
    router.add("GET", "/os-server-groups", lambda req: index(api, req))
    router.add("POST", "/os-server-groups", lambda req: create(api, req))
    router.add("GET", "/os-server-groups/{group_id}",
               lambda req, group_id: show(api, req, group_id))
    router.add("DELETE", "/os-server-groups/{group_id}",
               lambda req, group_id: delete(api, req, group_id))


def render(req: ApiRequest, group: ServerGroup, members: list[str]) -> dict[str, Any]:
    shown: dict[str, Any] = {"id": group.id, "name": group.name}
    if req.version.at_least("2.64"):
        shown.update(policy=group.policy, rules=dict(group.rules))
    else:
        shown.update(policies=[group.policy], metadata={})
    shown["members"] = members
    if req.version.at_least("2.13"):
        shown.update(project_id=group.project_id, user_id=group.user_id)
    return shown


def _group(api: Backend, req: ApiRequest, group_id: str, rule: str) -> ServerGroup:
    group = api.server_groups.get(group_id)
    # Nova's lookup filters by the caller's project unless is_admin (InstanceGroup's query).
    if group is None or (group.project_id != req.context.project_id and
                         not req.context.is_admin):
        raise not_found(f"Instance group {group_id[:100]} could not be found.")
    api.policy.authorize(req.context, policy.SERVER_GROUPS % rule,
                         {"project_id": group.project_id})
    return group


def show(api: Backend, req: ApiRequest, group_id: str) -> webob.Response:
    group = _group(api, req, group_id, "show")
    return json_response({"server_group": render(req, group, api.server_groups.members(group))})


def delete(api: Backend, req: ApiRequest, group_id: str) -> webob.Response:
    group = _group(api, req, group_id, "delete")
    api.server_groups.delete(group)
    return empty_response(204)


def index(api: Backend, req: ApiRequest) -> webob.Response:
    params = req.query()
    validation.query(schema.index_query_schema(req.version), params)
    context = req.context
    api.policy.authorize(context, policy.SERVER_GROUPS % "index",
                         {"project_id": context.project_id})
    if "all_projects" in params and context.is_admin:
        api.policy.authorize(context, policy.SERVER_GROUPS % "index:all_projects",
                             {"project_id": context.project_id})
        groups = api.server_groups.list()
    else:
        groups = api.server_groups.list(context.project_id)
    offset = int(params.get("offset", ["0"])[-1] or 0)
    limit = min(int(params.get("limit", [str(api.settings["max_limit"])])[-1] or 0),
                api.settings["max_limit"])
    groups = groups[offset:offset + limit]
    return json_response({"server_groups": [render(req, g, api.server_groups.members(g))
                                            for g in groups]})


def create(api: Backend, req: ApiRequest) -> webob.Response:
    body = req.json_body()
    validation.body(schema.create_schema(req.version), body)
    context = req.context
    api.policy.authorize(context, policy.SERVER_GROUPS % "create",
                         {"project_id": context.project_id})
    asked = body["server_group"]
    if req.version.at_least("2.64"):
        chosen = asked["policy"]
        rules = {k: int(v) for k, v in (asked.get("rules") or {}).items()}
        if chosen != "anti-affinity" and rules:
            raise bad_request("Only anti-affinity policy supports rules.")
        if rules.get("max_server_per_host", 1) > MAX_PER_HOST:
            raise bad_request(f"max_server_per_host: at most {MAX_PER_HOST} here")
    else:
        chosen, rules = asked["policies"][0], {}
    limit = api.quotas.limits(context.project_id)["server_groups"]
    try:
        group = api.server_groups.create(asked["name"], context.project_id, context.user_id,
                                         chosen, rules, limit)
    except TooManyGroups as exc:
        raise Fault(403, str(exc)) from None
    return json_response({"server_group": render(req, group, [])})

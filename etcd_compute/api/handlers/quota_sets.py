"""/os-quota-sets and /limits (Nova's quota_sets and limits controllers).

Our limits are Nova's legacy (database driver) quotas, kept in etcd: a project's, and
with `?user_id=` a user's within its project (show, update, delete), each at most the
project's, counted from the user's part of Placement's usage at a create."""

from __future__ import annotations

import re
from typing import Any

import webob

from etcd_compute.api import policy, validation
from etcd_compute.api.backend import Backend
from etcd_compute.api.microversion import Version
from etcd_compute.api.schemas import quota_sets as schema
from etcd_compute.api.schemas.parameter_types import is_true
from etcd_compute.api.wsgi import ApiRequest, Router, bad_request, empty_response, json_response

PROJECT = re.compile(r"\A[A-Za-z0-9_.-]{1,255}\Z")
# What Nova's API reports for quotas of services we do not run (networks until 2.36,
# file injection until 2.57): Nova's own defaults.
ABSENT = {"floating_ips": 10, "fixed_ips": -1, "security_groups": 10,
          "security_group_rules": 20, "injected_files": 5,
          "injected_file_content_bytes": 10240, "injected_file_path_bytes": 255}
ABSOLUTE = {"ram": ["maxTotalRAMSize"], "instances": ["maxTotalInstances"],
            "cores": ["maxTotalCores"], "key_pairs": ["maxTotalKeypairs"],
            "floating_ips": ["maxTotalFloatingIps"],
            "metadata_items": ["maxServerMeta", "maxImageMeta"],
            "injected_files": ["maxPersonality"],
            "injected_file_content_bytes": ["maxPersonalitySize"],
            "security_groups": ["maxSecurityGroups"],
            "security_group_rules": ["maxSecurityGroupRules"],
            "server_groups": ["maxServerGroups"],
            "server_group_members": ["maxServerGroupMembers"]}
USED = {"totalRAMUsed": "ram", "totalCoresUsed": "cores", "totalInstancesUsed": "instances",
        "totalFloatingIpsUsed": "floating_ips", "totalSecurityGroupsUsed": "security_groups",
        "totalServerGroupsUsed": "server_groups"}


def routes(router: Router, api: Backend) -> None:
    router.add("GET", "/limits", lambda req: limits(api, req))
    router.add("GET", "/os-quota-sets/{tenant_id}",
               lambda req, tenant_id: show(api, req, tenant_id))
    router.add("GET", "/os-quota-sets/{tenant_id}/detail",
               lambda req, tenant_id: show(api, req, tenant_id, detail=True))
    router.add("GET", "/os-quota-sets/{tenant_id}/defaults",
               lambda req, tenant_id: defaults(api, req, tenant_id))
    router.add("PUT", "/os-quota-sets/{tenant_id}",
               lambda req, tenant_id: update(api, req, tenant_id))
    router.add("DELETE", "/os-quota-sets/{tenant_id}",
               lambda req, tenant_id: delete(api, req, tenant_id))


def _project(tenant_id: str) -> str:
    if not PROJECT.match(tenant_id):
        raise bad_request(f"Invalid project id {tenant_id[:100]}")
    return tenant_id


def _all(api: Backend, limits: dict[str, int], version: Version) -> dict[str, int]:
    """Every quota Nova names at `version`: ours, and for what we lack the default class's
    (Nova's defaults unless an admin changed them)."""
    absent = {**ABSENT, **api.quotas.default_limits()}
    return {name: limits.get(name, absent.get(name, -1)) for name in schema.quotas_at(version)}


def _user(params: dict[str, list[str]]) -> str | None:
    """The `user_id` a call names (Nova's legacy per-user quotas), checked."""
    user_id = validation.single(params, "user_id")
    if user_id is not None and not PROJECT.match(user_id):
        raise bad_request(f"Invalid user id {user_id[:100]}")
    return user_id or None


def _limits(api: Backend, project_id: str, user_id: str | None) -> dict[str, int]:
    if user_id is None:
        return api.quotas.limits(project_id)
    return api.quotas.user_limits(project_id, user_id)


def _used(api: Backend, project_id: str, user_id: str | None = None) -> dict[str, int]:
    """In use: instances, cores and ram from Placement (the project's, or one user's
    there), the project's server groups; what Nova counts per user or per group (key
    pairs, members) or not at all is 0 here."""
    return {**api.quotas.usage(project_id, user_id),
            "key_pairs": 0, "server_groups": len(api.server_groups.list(project_id)),
            "server_group_members": 0, "metadata_items": 0}


def show(api: Backend, req: ApiRequest, tenant_id: str, detail: bool = False) -> webob.Response:
    params = req.query()
    validation.query(schema.show_query_schema(req.version), params)
    project_id = _project(tenant_id)
    user_id = _user(params)
    api.policy.authorize(req.context, policy.QUOTA_SETS % ("detail" if detail else "show"),
                         {"project_id": project_id})
    limits = _all(api, _limits(api, project_id, user_id), req.version)
    body: dict[str, Any] = {"id": project_id}
    if detail:
        used = _used(api, project_id, user_id)
        body.update({name: {"in_use": used.get(name, 0), "limit": limit, "reserved": 0}
                     for name, limit in limits.items()})
    else:
        body.update(limits)
    return json_response({"quota_set": body})


def defaults(api: Backend, req: ApiRequest, tenant_id: str) -> webob.Response:
    project_id = _project(tenant_id)
    api.policy.authorize(req.context, policy.QUOTA_SETS % "defaults",
                         {"project_id": project_id})
    return json_response({"quota_set": {"id": project_id,
                                        **_all(api, api.quotas.default_limits(),
                                               req.version)}})


def update(api: Backend, req: ApiRequest, tenant_id: str) -> webob.Response:
    params = req.query()
    validation.query(schema.show_query_schema(req.version), params)
    project_id = _project(tenant_id)
    user_id = _user(params)
    api.policy.authorize(req.context, policy.QUOTA_SETS % "update", {"project_id": project_id})
    body = req.json_body()
    validation.body(schema.update_schema(req.version), body)
    asked = dict(body["quota_set"])
    force = is_true(asked.pop("force", False))
    changes = {name: int(value) for name, value in asked.items()
               if name in api.quotas.defaults}
    if user_id is not None:
        # As Nova's legacy driver: a user's limit is within its project's.
        project_limits = api.quotas.limits(project_id)
        for name, value in changes.items():
            maximum = project_limits.get(name, -1)
            if maximum != -1 and (value == -1 or value > maximum):
                raise bad_request(f"Quota limit {value} for {name} must be less than or "
                                  f"equal to {maximum}.")
    if not force:
        used = _used(api, project_id, user_id)
        for name, value in changes.items():
            if value != -1 and value < used.get(name, 0):
                raise bad_request(f"Quota limit {value} for {name} must be greater than or "
                                  f"equal to already used and reserved {used[name]}.")
    if user_id is not None:
        limits = api.quotas.update_user(project_id, user_id, changes)
    else:
        limits = api.quotas.update(project_id, changes)
    return json_response({"quota_set": _all(api, limits, req.version)})


def delete(api: Backend, req: ApiRequest, tenant_id: str) -> webob.Response:
    params = req.query()
    validation.query(schema.show_query_schema(req.version), params)
    project_id = _project(tenant_id)
    user_id = _user(params)
    api.policy.authorize(req.context, policy.QUOTA_SETS % "delete", {"project_id": project_id})
    if user_id is not None:
        api.quotas.reset_user(project_id, user_id)
    else:
        api.quotas.reset(project_id)
    return empty_response(202)


def limits(api: Backend, req: ApiRequest) -> webob.Response:
    """Absolute limits and what the project uses (Nova's rate limits are gone: [])."""
    params = req.query()
    validation.query(schema.limits_query_schema(req.version), params)
    api.policy.authorize(req.context, policy.LIMITS)
    project_id = req.context.project_id
    asked = validation.single(params, "tenant_id")
    if asked is not None:  # Nova's: any tenant_id given, the caller's own too, is the rule's
        api.policy.authorize(req.context, policy.LIMITS_OTHER_PROJECT, {"project_id": asked})
        project_id = _project(asked)
    quota = _all(api, api.quotas.limits(project_id), Version(2, 1))
    used = _used(api, project_id)
    hidden: set[str] = set()
    if req.version.at_least("2.36"):
        hidden |= {"floating_ips", "security_groups", "security_group_rules", "fixed_ips"}
    if req.version.at_least("2.57"):
        hidden |= set(schema.INJECTION_QUOTAS)
    absolute: dict[str, int] = {}
    for name, shown in ABSOLUTE.items():
        if name in hidden:
            continue
        for key in shown:
            if key == "maxImageMeta" and req.version.at_least("2.39"):
                continue
            absolute[key] = quota.get(name, -1)
    for key, name in USED.items():
        if name not in hidden:
            absolute[key] = used.get(name, 0)
    return json_response({"limits": {"rate": [], "absolute": absolute}})

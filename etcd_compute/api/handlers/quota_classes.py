"""/os-quota-class-sets (admins): the default quota class, every project's limits unless
it has its own (os-quota-sets). Changing it changes `api.quotas` for all, kept in etcd
(`/quota-classes/default`). As in Nova only the class `default` is used; showing another
shows the defaults, and changing another is refused (it would change nothing)."""

from __future__ import annotations

import webob

from etcd_compute.api import policy, validation
from etcd_compute.api.backend import Backend
from etcd_compute.api.objects.quotas import DEFAULT_CLASS
from etcd_compute.api.schemas import quota_classes as schema
from etcd_compute.api.wsgi import ApiRequest, Router, bad_request, json_response


def routes(router: Router, api: Backend) -> None:
    router.add("GET", "/os-quota-class-sets/{class_name}",
               lambda req, class_name: show(api, req, class_name))
    router.add("PUT", "/os-quota-class-sets/{class_name}",
               lambda req, class_name: update(api, req, class_name))


def _shown(limits: dict[str, int], req: ApiRequest) -> dict[str, int]:
    return {name: limits.get(name, -1) for name in schema.quotas_at(req.version)}


def show(api: Backend, req: ApiRequest, class_name: str) -> webob.Response:
    api.policy.authorize(req.context, policy.QUOTA_CLASS_SETS % "show", {})
    if len(class_name) > 255:
        raise bad_request("Invalid quota class name")
    return json_response({"quota_class_set": {
        "id": class_name, **_shown(api.quotas.default_limits(), req)}})


def update(api: Backend, req: ApiRequest, class_name: str) -> webob.Response:
    api.policy.authorize(req.context, policy.QUOTA_CLASS_SETS % "update", {})
    body = req.json_body()
    validation.body(schema.update_schema(req.version), body)
    if class_name != DEFAULT_CLASS:
        raise bad_request(f"Only the quota class '{DEFAULT_CLASS}' is used here.")
    changes = {name: int(value) for name, value in body["quota_class_set"].items()
               if name != schema.NETWORKS}  # Nova takes it and has no such quota
    limits = api.quotas.update_defaults(changes)
    return json_response({"quota_class_set": _shown(limits, req)})

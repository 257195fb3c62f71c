"""/os-services (Nova's services controller, admins only): our compute hosts as
`nova-compute` services; disabling one with a reason is `schedule.py host disable`.

forced_down is always false: a host here is down when its heartbeat lease ends (the
controller then recovers its instances); forcing it down while it runs would take its
guests from under it, so forced_down true is refused and false changes nothing. Deleting
a service removes a host that holds no instance from Placement (a compute that runs
registers again when it restarts), as Nova deletes its compute node's provider.
"""

from __future__ import annotations

from typing import Any

import webob

from etcd_compute.api import policy, validation
from etcd_compute.api.backend import Backend
from etcd_compute.api.objects.computes import Compute
from etcd_compute.api.schemas import services as schema
from etcd_compute.api.schemas.parameter_types import is_true
from etcd_compute.api.views import computes as view
from etcd_compute.api.wsgi import (
    ApiRequest,
    Fault,
    Router,
    bad_request,
    empty_response,
    json_response,
    not_found,
)
from etcd_compute.errors import NotFound
from etcd_compute.keys import UUID
from etcd_compute.scheduler.spec import api_caller

FORCED_DOWN = ("forced_down is not supported here: a host is down when its heartbeat lease "
               "ends, and the controller then recovers its instances")


def routes(router: Router, api: Backend) -> None:
    router.add("GET", "/os-services", lambda req: index(api, req))
    router.add("PUT", "/os-services/{service_id}",
               lambda req, service_id: update(api, req, service_id))
    router.add("DELETE", "/os-services/{service_id}",
               lambda req, service_id: delete(api, req, service_id))


def index(api: Backend, req: ApiRequest) -> webob.Response:
    params = req.query()
    validation.query(schema.index_query_schema(req.version), params)
    api.policy.authorize(req.context, policy.SERVICES % "list", {})
    host = (params.get("host") or [""])[-1]
    binary = (params.get("binary") or [""])[-1]
    found = [c for c in api.computes.list(with_resources=False)
             if (not host or c.name == host) and (not binary or binary == view.BINARY)]
    return json_response({"services": [view.service(req, c) for c in found]})


def _by_host(api: Backend, host: str, binary: str) -> Compute:
    if binary != view.BINARY:
        raise bad_request(f"Updating a {binary[:64]} service is not supported. Only "
                          "nova-compute services can be updated.")
    for compute in api.computes.list(with_resources=False):
        if compute.name == host:
            return compute
    raise not_found(f"Compute service of {host[:255]} could not be found.")


def update(api: Backend, req: ApiRequest, service_id: str) -> webob.Response:
    body = req.json_body()
    validation.body(schema.update_schema(req.version), body)
    api.policy.authorize(req.context, policy.SERVICES % "update", {})
    by = api_caller(req.context.user_id, req.context.project_id)
    if not req.version.at_least("2.53"):
        return _update_legacy(api, req, service_id, body, by)
    if not UUID.match(service_id):
        raise bad_request(f"Invalid uuid {service_id[:100]}")
    try:
        compute = api.computes.find(service_id, with_resources=False)
    except NotFound:
        raise not_found(f"Service {service_id} could not be found.") from None
    if "status" not in body and "forced_down" not in body:
        raise bad_request("No updates were requested. Fields 'status' or 'forced_down' "
                          "should be specified.")
    if body.get("status") == "enabled" and body.get("disabled_reason"):
        raise bad_request("Specifying 'disabled_reason' with status 'enabled' is invalid.")
    if "forced_down" in body and is_true(body["forced_down"]):
        raise bad_request(FORCED_DOWN)
    if body.get("status") == "disabled":
        api.computes.disable(compute, body.get("disabled_reason"), by)
    elif body.get("status") == "enabled":
        api.computes.enable(compute)
    compute = api.computes.find(service_id, with_resources=False)
    return json_response({"service": view.service(req, compute)})


def _update_legacy(api: Backend, req: ApiRequest, action: str, body: dict[str, Any],
                   by: str) -> webob.Response:
    """Before 2.53: PUT /os-services/enable, disable, disable-log-reason, force-down."""
    actions = ["enable", "disable", "disable-log-reason"] + (
        ["force-down"] if req.version.at_least("2.11") else [])
    if action not in actions:
        raise not_found("Unknown action")
    compute = _by_host(api, body["host"], body["binary"])
    shown: dict[str, Any] = {"host": body["host"], "binary": body["binary"]}
    if action == "force-down":
        if "forced_down" not in body:
            raise bad_request("Missing forced_down field")
        if is_true(body["forced_down"]):
            raise bad_request(FORCED_DOWN)
        return json_response({"service": {**shown, "forced_down": False}})
    if action == "enable":
        api.computes.enable(compute)
        return json_response({"service": {**shown, "status": "enabled"}})
    reason = None
    if action == "disable-log-reason":
        reason = body.get("disabled_reason")
        if reason is None:
            raise bad_request("Missing disabled reason field")
    api.computes.disable(compute, reason, by)
    shown["status"] = "disabled"
    if reason:
        shown["disabled_reason"] = reason
    return json_response({"service": shown})


def delete(api: Backend, req: ApiRequest, service_id: str) -> webob.Response:
    api.policy.authorize(req.context, policy.SERVICES % "delete", {})
    if req.version.at_least("2.53"):
        if not UUID.match(service_id):
            raise bad_request(f"Invalid uuid {service_id[:100]}")
    elif not service_id.isdigit():
        raise bad_request(f"Invalid id {service_id[:100]}: it must be an integer")
    try:
        compute = api.computes.find(service_id, with_resources=False)
    except NotFound:
        raise not_found(f"Service {service_id[:100]} not found.") from None
    if compute.instances:
        raise Fault(409, "Unable to delete compute service that is hosting instances. "
                         "Migrate or delete the instances first.")
    # As Nova: the host leaves its aggregates first (else they could never be emptied).
    for aggregate in api.aggregates.list():
        if compute.name in aggregate.hosts:
            api.aggregates.remove_host(aggregate, compute.name, compute.uuid)
    api.computes.delete(compute)
    return empty_response(204)

"""/os-hosts (Nova's hosts controller, admins only, microversions 2.1 to 2.42; 404 from
2.43 as in Nova): each compute host, as os-services shows it, by name.

list (filtered by zone), show (the host's size, its use now, the largest use its
instances may reach and each project's part: Placement's inventories and usages, the
instances' records), update (`status` enable/disable is os-services' disable: `schedule.py
host disable`). Maintenance mode and the power actions (startup, shutdown, reboot) are
501 as for Nova's libvirt driver, which has none of them.
"""

from __future__ import annotations

from collections import defaultdict
from typing import Any

import webob

from etcd_compute import messages
from etcd_compute.api import policy, validation
from etcd_compute.api.backend import Backend
from etcd_compute.api.objects.computes import DISK, RAM, VCPU, Compute
from etcd_compute.api.schemas import hosts as schema
from etcd_compute.api.wsgi import ApiRequest, Fault, Router, json_response, not_found
from etcd_compute.instances import states
from etcd_compute.scheduler.spec import api_caller

# Nova's name of a compute host's service, as os-hosts lists it.
SERVICE = "compute"
NOT_SUPPORTED = "The requested functionality is not supported."


def routes(router: Router, api: Backend) -> None:
    router.add("GET", "/os-hosts", lambda req: index(api, req))
    router.add("GET", "/os-hosts/{host_name}", lambda req, host_name: show(api, req, host_name))
    router.add("PUT", "/os-hosts/{host_name}",
               lambda req, host_name: update(api, req, host_name))
    for action, rule in (("startup", "start"), ("shutdown", "shutdown"),
                         ("reboot", "reboot")):
        router.add("GET", f"/os-hosts/{{host_name}}/{action}",
                   lambda req, host_name, rule=rule: power_action(api, req, host_name, rule))


def _served(req: ApiRequest) -> None:
    if req.version.at_least("2.43"):  # Nova removed os-hosts in 2.43
        raise not_found("The resource could not be found.")


def _host(api: Backend, name: str, with_resources: bool = False) -> Compute:
    for compute in api.computes.list(with_resources=with_resources):
        if compute.name == name:
            return compute
    raise not_found(f"Host {name[:255]} could not be found.")


def index(api: Backend, req: ApiRequest) -> webob.Response:
    _served(req)
    params = req.query()
    validation.query(schema.index_query, params)
    api.policy.authorize(req.context, policy.HOSTS % "list", {})
    zone = validation.single(params, "zone")
    return json_response({"hosts": [
        {"host_name": c.name, "service": SERVICE, "zone": c.zone}
        for c in api.computes.list(with_resources=False) if not zone or c.zone == zone]})


def show(api: Backend, req: ApiRequest, host_name: str) -> webob.Response:
    _served(req)
    api.policy.authorize(req.context, policy.HOSTS % "show", {})
    compute = _host(api, host_name, with_resources=True)
    per_project: dict[str, dict[str, int]] = defaultdict(lambda: {VCPU: 0, RAM: 0, DISK: 0})
    held = api.store.read_prefix(messages.INSTANCE_RECORD, api.store.keys.records(compute.uuid))
    for record in held.values():
        if record["state"] == states.DELETED or not record.get("project_id"):
            continue
        for rc in (VCPU, RAM, DISK):
            per_project[record["project_id"]][rc] += int((record.get("resources") or {})
                                                         .get(rc, 0))
    used = {rc: compute.used(rc) for rc in (VCPU, RAM, DISK)}
    rows = [("(total)", {rc: compute.total(rc) for rc in (VCPU, RAM, DISK)}),
            ("(used_now)", used), ("(used_max)", used),
            *sorted(per_project.items())]
    return json_response({"host": [
        {"resource": {"host": compute.name, "project": project, "cpu": amounts[VCPU],
                      "memory_mb": amounts[RAM], "disk_gb": amounts[DISK]}}
        for project, amounts in rows]})


def update(api: Backend, req: ApiRequest, host_name: str) -> webob.Response:
    _served(req)
    body = req.json_body()
    validation.body(schema.update, body)
    api.policy.authorize(req.context, policy.HOSTS % "update", {})
    compute = _host(api, host_name)
    if "maintenance_mode" in body:
        raise Fault(501, NOT_SUPPORTED)
    shown: dict[str, Any] = {"host": compute.name}
    if body["status"] == "disable":
        api.computes.disable(compute, None, api_caller(req.context.user_id,
                                                       req.context.project_id))
        shown["status"] = "disabled"
    else:
        api.computes.enable(compute)
        shown["status"] = "enabled"
    return json_response(shown)


def power_action(api: Backend, req: ApiRequest, host_name: str, rule: str) -> webob.Response:
    _served(req)
    api.policy.authorize(req.context, policy.HOSTS % rule, {})
    _host(api, host_name)
    raise Fault(501, NOT_SUPPORTED)

"""/os-hypervisors (Nova's hypervisors controller, admins only): each compute host's size
and use from Placement (inventories and usages), its state from its heartbeat, its status
from an operator's disable. As Nova up to 2.87: the statistics, the per-hypervisor sizes,
uptime (since the machine started, as the host's heartbeat says; 501 as for Nova's drivers
without it when a host does not say), and before 2.53
the search and servers routes (from 2.53 query parameters)."""

from __future__ import annotations

import time
from typing import Any

import webob

from etcd_compute import messages
from etcd_compute.api import paging, policy, validation
from etcd_compute.api.backend import Backend
from etcd_compute.api.objects.computes import Compute
from etcd_compute.api.schemas import hypervisors as schema
from etcd_compute.api.schemas.parameter_types import is_true
from etcd_compute.api.views import computes as view
from etcd_compute.api.wsgi import ApiRequest, Fault, Router, bad_request, json_response, not_found
from etcd_compute.errors import NotFound
from etcd_compute.instances import states
from etcd_compute.keys import UUID


def routes(router: Router, api: Backend) -> None:
    router.add("GET", "/os-hypervisors", lambda req: index(api, req, detail=False))
    router.add("GET", "/os-hypervisors/detail", lambda req: index(api, req, detail=True))
    router.add("GET", "/os-hypervisors/statistics", lambda req: statistics(api, req))
    router.add("GET", "/os-hypervisors/{hypervisor_id}",
               lambda req, hypervisor_id: show(api, req, hypervisor_id))
    router.add("GET", "/os-hypervisors/{hypervisor_id}/uptime",
               lambda req, hypervisor_id: uptime(api, req, hypervisor_id))
    router.add("GET", "/os-hypervisors/{pattern}/search",
               lambda req, pattern: search(api, req, pattern, servers=False))
    router.add("GET", "/os-hypervisors/{pattern}/servers",
               lambda req, pattern: search(api, req, pattern, servers=True))


def _servers(api: Backend, compute: Compute) -> list[dict[str, Any]]:
    """The instances on a host, as Nova lists a hypervisor's servers (uuid and name)."""
    held = api.store.read_prefix(messages.INSTANCE_RECORD, api.store.keys.records(compute.uuid))
    return [{"name": r.get("name") or "", "uuid": uuid} for uuid, r in sorted(held.items())
            if r["state"] != states.DELETED]


def _matching(api: Backend, pattern: str) -> list[Compute]:
    found = [c for c in api.computes.list() if pattern in c.name]
    if not found:
        raise not_found(f"No hypervisor matching '{pattern[:255]}' could be found.")
    return found


def index(api: Backend, req: ApiRequest, detail: bool) -> webob.Response:
    params = req.query()
    validation.query(schema.index_query_schema(req.version), params)
    api.policy.authorize(req.context, policy.HYPERVISORS % ("list-detail" if detail
                                                            else "list"), {})
    pattern = with_servers = None
    if req.version.at_least("2.53"):
        pattern = validation.single(params, "hypervisor_hostname_pattern")
        with_servers = is_true(validation.single(params, "with_servers") or False)
    body: dict[str, Any] = {}
    if pattern is not None:
        if "limit" in params or "marker" in params:
            raise bad_request("Paging over hypervisors with the hypervisor_hostname_pattern "
                              "query parameter is not supported.")
        found = _matching(api, pattern)
    else:
        found = api.computes.list()
        if req.version.at_least("2.33"):
            limit, marker = paging.limit_and_marker(req, api.settings["max_limit"])

            def key(compute: Compute) -> str:
                return str(view.compute_id(req, compute))

            found = paging.page(found, key, limit, marker)
            links = paging.next_links(req, found, key,
                                      "os-hypervisors/detail" if detail else "os-hypervisors",
                                      api.settings["max_limit"])
            if links:
                body["hypervisors_links"] = links
    shown = [view.hypervisor(req, c, detail, _servers(api, c) if with_servers else None,
                             bool(with_servers)) for c in found]
    return json_response({"hypervisors": shown, **body})


def _find(api: Backend, req: ApiRequest, hypervisor_id: str) -> Compute:
    if req.version.at_least("2.53"):
        if not UUID.match(hypervisor_id):
            raise bad_request(f"Invalid uuid {hypervisor_id[:100]}")
    elif not hypervisor_id.isdigit():
        raise not_found(f"Hypervisor with ID '{hypervisor_id[:100]}' could not be found.")
    try:
        return api.computes.find(hypervisor_id)
    except NotFound:
        raise not_found(f"Hypervisor with ID '{hypervisor_id[:100]}' could not be "
                        "found.") from None


def show(api: Backend, req: ApiRequest, hypervisor_id: str) -> webob.Response:
    params = req.query()
    validation.query(schema.show_query_schema(req.version), params)
    api.policy.authorize(req.context, policy.HYPERVISORS % "show", {})
    compute = _find(api, req, hypervisor_id)
    with_servers = req.version.at_least("2.53") and \
        is_true(validation.single(params, "with_servers") or False)
    return json_response({"hypervisor": view.hypervisor(
        req, compute, True, _servers(api, compute) if with_servers else None, with_servers)})


def uptime(api: Backend, req: ApiRequest, hypervisor_id: str) -> webob.Response:
    api.policy.authorize(req.context, policy.HYPERVISORS % "uptime", {})
    compute = _find(api, req, hypervisor_id)
    if compute.booted_at is None:  # a host that does not say (down, or an old compute)
        raise Fault(501, "Virt driver does not implement uptime function.")
    return json_response({"hypervisor": {**view.hypervisor(req, compute, False),
                                         "uptime": view.uptime(compute, time.time())}})


def search(api: Backend, req: ApiRequest, pattern: str, servers: bool) -> webob.Response:
    if req.version.at_least("2.53"):
        raise not_found("The resource could not be found.")
    api.policy.authorize(req.context, policy.HYPERVISORS % ("servers" if servers
                                                            else "search"), {})
    return json_response({"hypervisors": [
        view.hypervisor(req, c, False, _servers(api, c) if servers else None)
        for c in _matching(api, pattern)]})


def statistics(api: Backend, req: ApiRequest) -> webob.Response:
    api.policy.authorize(req.context, policy.HYPERVISORS % "statistics", {})
    return json_response({"hypervisor_statistics": view.statistics(api.computes.list())})

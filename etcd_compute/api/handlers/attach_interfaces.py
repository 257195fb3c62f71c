"""/servers/{id}/os-interface (Nova's attach_interfaces.py), the neutron backend: a server's
interfaces are its Neutron ports (device_id = the server), as the caller's Neutron shows
them, in Nova's view (`views/ports.py`).

Listing and showing are served. Attaching and detaching are checked as Nova checks them
(the body's schema, the rule, the server, a network and a port not both, a fixed IP only
with a network, the lock, the state) and then answered 400: the compute cannot plug or
unplug a port into a running guest yet (Nova's AttachInterfaceNotSupported, and its like
for a detach), never accepted and ignored. Under the libvirt backend os-interface is not
served (404).
"""

from __future__ import annotations

import webob

from etcd_compute.api import policy, validation
from etcd_compute.api.backend import Backend
from etcd_compute.api.handlers import action_checks as checks
from etcd_compute.api.handlers.servers import check_lock, lookup
from etcd_compute.api.objects.servers import Server
from etcd_compute.api.schemas import attach_interfaces as schema
from etcd_compute.api.views import ports as view
from etcd_compute.api.wsgi import ApiRequest, Router, bad_request, json_response, not_found
from etcd_compute.errors import NotFound

ATTACH = policy.ATTACH_INTERFACES


def routes(router: Router, api: Backend) -> None:
    path = "/servers/{server_id}/os-interface"
    router.add("GET", path, lambda req, server_id: index(api, req, server_id))
    router.add("POST", path, lambda req, server_id: create(api, req, server_id))
    router.add("GET", path + "/{port_id}",
               lambda req, server_id, port_id: show(api, req, server_id, port_id))
    router.add("DELETE", path + "/{port_id}",
               lambda req, server_id, port_id: delete(api, req, server_id, port_id))


def _served(api: Backend) -> None:
    if api.neutron is None:  # every guest is on its host's network: no ports to show
        raise not_found("The resource could not be found.")


def _server(api: Backend, req: ApiRequest, server_id: str, rule: str) -> Server:
    _served(api)
    server = lookup(api, req, server_id)
    api.policy.authorize(req.context, ATTACH % rule, {"project_id": server.project_id})
    return server


def index(api: Backend, req: ApiRequest, server_id: str) -> webob.Response:
    server = _server(api, req, server_id, "list")
    ports = api.neutron(req.context).ports(device_id=server.uuid)
    tag = req.version.at_least("2.70")
    return json_response({"interfaceAttachments": [view.interface(p, tag) for p in ports]})


def show(api: Backend, req: ApiRequest, server_id: str, port_id: str) -> webob.Response:
    server = _server(api, req, server_id, "show")
    try:
        port = api.neutron(req.context).port(port_id)
    except NotFound:
        raise not_found(f"Port id {port_id[:64]} could not be found.") from None
    if port.get("device_id") != server.uuid:
        raise not_found(f"Instance {server.uuid} does not have a port with id {port_id}")
    return json_response({"interfaceAttachment": view.interface(
        port, req.version.at_least("2.70"))})


def _plugging(req: ApiRequest, server: Server, action: str) -> None:
    """Nova's checks of the instance for a hot plug: its lock (409), its state (409)."""
    check_lock(req, server)
    checks.check_state(server, action, ("active", "paused", "stopped"))


def create(api: Backend, req: ApiRequest, server_id: str) -> webob.Response:
    _served(api)
    body = req.json_body()
    validation.body(schema.create_schema(req.version), body)
    server = _server(api, req, server_id, "create")
    asked = body.get("interfaceAttachment") or {}
    if asked.get("net_id") and asked.get("port_id"):
        raise bad_request("Must not input both network_id and port_id")
    if asked.get("fixed_ips") and not asked.get("net_id"):
        raise bad_request("Must input network_id when request IP address")
    _plugging(req, server, "attach_interface")
    raise bad_request(f"Attaching interfaces is not supported for instance {server.uuid}.")


def delete(api: Backend, req: ApiRequest, server_id: str, port_id: str) -> webob.Response:
    server = _server(api, req, server_id, "delete")
    _plugging(req, server, "detach_interface")
    ports = api.neutron(req.context).ports(device_id=server.uuid)
    if port_id not in {port["id"] for port in ports}:
        raise not_found(f"Port {port_id[:64]} is not attached")
    raise bad_request(f"Detaching interfaces is not supported for instance {server.uuid}.")

"""/servers/{id}/os-interface (Nova's attach_interfaces.py), the neutron backend: a server's
interfaces are its Neutron ports (device_id = the server), as the caller's Neutron shows
them, in Nova's view (`views/ports.py`).

Attaching (POST) is checked as Nova checks it (the body's schema, the rule, the server, a
network and a port not both, a fixed IP only with a network, the lock, the state: 409
while locked, in another task or not active or stopped), and the network or port as the
caller's Neutron shows it (`objects/requested_networks.py`: 404 not found, 409 a port in
use, 400 a fixed IP outside the network or taken, 403 an external network). Then the
server's host makes the port (or binds the caller's) under the service user and plugs
it into the guest (`compute/ports.py`, `drivers/libvirt_hotplug.py`), as the record's
task `attach-interface`; the answer waits for it, as Nova's synchronous call does: 200
and the interfaceAttachment (its `tag` from 2.70), or 500 with the host's reason.

Detaching (DELETE) checks the same, then that the port is the server's (404 "Port X is
not attached"), and answers 202 at once; the host unplugs it and deletes it (made for the
server) or unbinds it (the user's), task `detach-interface`. Both are instance actions,
`attach_interface` and `detach_interface`, as Nova records them. Under the libvirt
backend os-interface is not served (404).
"""

from __future__ import annotations

from typing import Any

import webob

from etcd_compute.api import policy, validation
from etcd_compute.api.backend import Backend
from etcd_compute.api.handlers import action_checks as checks
from etcd_compute.api.handlers.servers import check_lock, lookup
from etcd_compute.api.objects import requested_networks
from etcd_compute.api.objects.servers import Server
from etcd_compute.api.schemas import attach_interfaces as schema
from etcd_compute.api.views import ports as view
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
from etcd_compute.instances import states
from etcd_compute.ops import lifecycle
from etcd_compute.ops.operations import WaitTimeout

ATTACH = policy.ATTACH_INTERFACES
# How long an attach waits for the host (Nova's synchronous call: its RPC timeout).
ATTACH_SECONDS = 120.0
# A server's ports at most (an instance spec's networks: its schema's maxItems).
MAX_PORTS = 16


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


def _nic(api: Backend, req: ApiRequest, asked: dict[str, Any]) -> dict[str, str]:
    """The attach's network or port, as the caller's Neutron shows it: the request's `nic`
    (one item of the spec's networks)."""
    if asked.get("port_id"):
        item: dict[str, Any] = {"port": asked["port_id"]}
    elif asked.get("net_id"):
        item = {"uuid": asked["net_id"], **({"fixed_ip": asked["fixed_ips"][0]["ip_address"]}
                                            if asked.get("fixed_ips") else {})}
    else:  # Nova's get-me-a-network for an attach is not ours
        raise bad_request("Must input network_id or port_id")
    project = req.context.project_id
    try:
        wanted = requested_networks.networks(
            api.neutron(req.context), project, [item], 1,
            external_ok=api.policy.allows(req.context, policy.ATTACH_EXTERNAL_NETWORK,
                                          {"project_id": project}))
    except (requested_networks.NetworkNotFound, requested_networks.PortNotFound) as exc:
        raise not_found(str(exc)) from None  # Nova's attach: 404 (its create: 400)
    except requested_networks.NetworkRequestRefused as exc:
        raise Fault(exc.code, str(exc)) from None
    assert wanted
    return dict(wanted[0])


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
    if asked.get("tag") is not None:
        raise bad_request("Device tags are not supported")
    _plugging(req, server, "attach_interface")
    neutron = api.neutron(req.context)
    before = {port["id"] for port in neutron.ports(device_id=server.uuid)}
    if len(before) >= MAX_PORTS:
        raise Fault(403, f"Maximum number of ports exceeded (at most {MAX_PORTS} a server "
                         "here)")
    nic = _nic(api, req, asked)
    requested = checks.asked(lambda: api.actions.plug(server, states.ATTACH_INTERFACE, nic,
                                                      checks.caller(req)))
    try:
        outcome = lifecycle.wait(api.store, requested, ATTACH_SECONDS, lambda *_: None)
    except WaitTimeout as exc:
        raise Fault(500, f"Failed to attach network adapter device to {server.uuid}: "
                         f"{exc}") from None
    if not outcome.ok:
        raise Fault(500, f"Failed to attach network adapter device to {server.uuid}: "
                         f"{outcome.error[:300]}")
    ports = neutron.ports(device_id=server.uuid)
    new = [p for p in ports if p["id"] == nic.get("port")] or \
        [p for p in ports if p["id"] not in before]
    if not new:
        raise Fault(500, f"Failed to attach network adapter device to {server.uuid}: the "
                         "port is gone")
    return json_response({"interfaceAttachment": view.interface(
        new[0], req.version.at_least("2.70"))})


def delete(api: Backend, req: ApiRequest, server_id: str, port_id: str) -> webob.Response:
    server = _server(api, req, server_id, "delete")
    _plugging(req, server, "detach_interface")
    ports = api.neutron(req.context).ports(device_id=server.uuid)
    if port_id not in {port["id"] for port in ports}:
        raise not_found(f"Port {port_id[:64]} is not attached")
    checks.asked(lambda: api.actions.plug(server, states.DETACH_INTERFACE, {"port": port_id},
                                          checks.caller(req)))
    return empty_response(202)

"""/servers/{id}/ips[/{network}] (Nova's ips controller): the server's addresses, by the
network's name: under the libvirt backend on our network (`api.network_name`), none while
it builds; under the neutron backend its ports' fixed IPs."""

from __future__ import annotations

from typing import Any

import webob

from etcd_compute.api import policy
from etcd_compute.api.backend import Backend
from etcd_compute.api.handlers.servers import lookup
from etcd_compute.api.objects.server_ports import ServerPorts
from etcd_compute.api.objects.servers import Server
from etcd_compute.api.views import ports as port_view
from etcd_compute.api.views import servers as view
from etcd_compute.api.wsgi import ApiRequest, Router, json_response, not_found


def routes(router: Router, api: Backend) -> None:
    router.add("GET", "/servers/{server_id}/ips",
               lambda req, server_id: index(api, req, server_id))
    router.add("GET", "/servers/{server_id}/ips/{network}",
               lambda req, server_id, network: show(api, req, server_id, network))


def _ips(api: Backend, req: ApiRequest, server: Server) -> dict[str, Any]:
    if api.neutron is None:
        return view.ips(server, api.settings["network_name"])
    ports = ServerPorts.of(api.neutron(req.context), [server.uuid])
    return port_view.ips(port_view.addresses(ports.of_server(server.uuid),
                                             ports.network_name, ports.floating))


def index(api: Backend, req: ApiRequest, server_id: str) -> webob.Response:
    server = lookup(api, req, server_id)
    api.policy.authorize(req.context, policy.IPS % "index", {"project_id": server.project_id})
    return json_response({"addresses": _ips(api, req, server)})


def show(api: Backend, req: ApiRequest, server_id: str, network: str) -> webob.Response:
    server = lookup(api, req, server_id)
    api.policy.authorize(req.context, policy.IPS % "show", {"project_id": server.project_id})
    found = _ips(api, req, server)
    if network not in found:
        raise not_found("Instance is not a member of specified network")
    return json_response({network: found[network]})

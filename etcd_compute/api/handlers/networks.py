"""/os-networks (Nova's deprecated network proxy, microversions 2.1 to 2.35; 404 from
2.36 as in Nova): the one network every server is on (`api.network_name`), read only; under
the neutron backend the Neutron networks the caller sees (Nova's proxy: id and label).

Its id is stable (a uuid5 of its name); what Nova shows of a network that this API does
not know (addresses, bridge, VLAN) is null, as Nova shows a Neutron network's. Creating,
deleting or associating networks is not served (there is no network service)."""

from __future__ import annotations

import uuid as uuidlib
from typing import Any

import webob

from etcd_compute.api import policy
from etcd_compute.api.backend import Backend
from etcd_compute.api.wsgi import ApiRequest, Router, json_response, not_found
from etcd_compute.errors import NotFound

_NAMESPACE = uuidlib.UUID("6f1c0f6e-3b0a-4c1e-9d1e-2f8f3c6a9a01")
FIELDS = ("cidr", "netmask", "gateway", "broadcast", "dns1", "dns2", "cidr_v6",
          "gateway_v6", "netmask_v6")
ADMIN_FIELDS = ("created_at", "updated_at", "deleted_at", "deleted", "injected", "bridge",
                "vlan", "vpn_public_address", "vpn_public_port", "vpn_private_address",
                "dhcp_start", "project_id", "host", "bridge_interface", "multi_host",
                "priority", "rxtx_base", "mtu", "dhcp_server", "enable_dhcp", "share_address")


def routes(router: Router, api: Backend) -> None:
    router.add("GET", "/os-networks", lambda req: index(api, req))
    router.add("GET", "/os-networks/{network_id}",
               lambda req, network_id: show(api, req, network_id))
    router.add("GET", "/os-tenant-networks", lambda req: tenant_index(api, req))
    router.add("GET", "/os-tenant-networks/{network_id}",
               lambda req, network_id: tenant_show(api, req, network_id))


def network_id(name: str) -> str:
    return str(uuidlib.uuid5(_NAMESPACE, name))


def _view(req: ApiRequest, name: str, id_: str | None = None) -> dict[str, Any]:
    shown: dict[str, Any] = {"id": id_ or network_id(name), "label": name}
    shown.update(dict.fromkeys(FIELDS))
    if req.context.is_admin:
        shown.update(dict.fromkeys(ADMIN_FIELDS))
    return shown


def _served(req: ApiRequest) -> None:
    if req.version.at_least("2.36"):  # Nova removed the network proxy in 2.36
        raise not_found("The resource could not be found.")


def index(api: Backend, req: ApiRequest) -> webob.Response:
    _served(req)
    api.policy.authorize(req.context, policy.NETWORKS % "list", {})
    if api.neutron is not None:
        return json_response({"networks": [
            _view(req, str(net.get("name") or ""), net["id"])
            for net in api.neutron(req.context).networks()]})
    return json_response({"networks": [_view(req, api.settings["network_name"])]})


def show(api: Backend, req: ApiRequest, network_id_: str) -> webob.Response:
    _served(req)
    api.policy.authorize(req.context, policy.NETWORKS % "view", {})
    if api.neutron is not None:
        try:
            net = api.neutron(req.context).network(network_id_)
        except NotFound:
            raise not_found("Network not found") from None
        return json_response({"network": _view(req, str(net.get("name") or ""), net["id"])})
    name = api.settings["network_name"]
    if network_id_ != network_id(name):
        raise not_found(f"Network {network_id_[:64]} could not be found.")
    return json_response({"network": _view(req, name)})


# /os-tenant-networks (Nova's tenant_networks.py, to 2.35), under the neutron backend only
# (404 otherwise): the Neutron networks the caller sees, as Nova's `network_dict` shows
# them (id, label, and cidr as Nova's str() of an absent one: "None").


def _tenant_view(net: dict[str, Any]) -> dict[str, Any]:
    return {"id": net["id"], "cidr": "None", "label": net.get("name")}


def _tenant_served(api: Backend, req: ApiRequest, rule: str) -> None:
    _served(req)
    if api.neutron is None:
        raise not_found("The resource could not be found.")
    api.policy.authorize(req.context, policy.TENANT_NETWORKS % rule,
                         {"project_id": req.context.project_id})


def tenant_index(api: Backend, req: ApiRequest) -> webob.Response:
    _tenant_served(api, req, "list")
    assert api.neutron is not None
    return json_response({"networks": [_tenant_view(net)
                                       for net in api.neutron(req.context).networks()]})


def tenant_show(api: Backend, req: ApiRequest, network_id_: str) -> webob.Response:
    _tenant_served(api, req, "show")
    assert api.neutron is not None
    try:
        net = api.neutron(req.context).network(network_id_)
    except NotFound:
        raise not_found("Network not found") from None
    return json_response({"network": _tenant_view(net)})

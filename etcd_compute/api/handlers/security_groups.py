"""addSecurityGroup and removeSecurityGroup (Nova's security group action controller) and
GET /servers/{id}/os-security-groups (its server security group controller).

The neutron backend: Neutron's groups on the server's ports, with the caller's Neutron, as
Nova's network/security_group_api.py reads and changes them
(`objects/server_security_groups.py`): a group named or by id, 404 when the project has
none of that name ("Security group X is not found for project P") or the server no port,
409 for a name two groups have, 400 for a port without port security or an address, 404
removing one no port has ("Security group X not associated with the instance U"). The list
is Nova's proxy view (`views/security_groups.py`).

The libvirt backend: the one security group there is (below); the list is not served
(404, as before: ours is not a set of rules that could be listed truthfully).

Every project has one security group, `default`: the hosts' network as it is (guests reach
each other and NAT out). A server on the network is in it from its create; removed from
it, its traffic is dropped both ways but DHCP, as Neutron drops a port's with port
security and no groups; added back, it is the network's again. The anti-spoofing and the
host guard are no group's: they always apply (virt/nwfilter.py). The membership is the
instance's (its spec and record, `security_groups`); the change goes to its host as the
other actions do (`ops/lifecycle.py`, action `security-groups`), and the view shows the
asked membership at once (Nova's shows the port's at once too).

As Nova answers (nova/api/openstack/compute/security_groups.py, network/security_group_api.py):
the body's schema (400), the server (404), the rule (403), an empty name (400); a group
other than `default` 404 "Security group X is not found for project P"; a server without
a network interface 404 (Nova: no port); removing a group it is not in 404 "Security group
X not associated with the instance U"; adding one it is in changes nothing (202, as
Neutron keeps a port's groups a set). Nova checks neither the lock nor the state; here the
host must be up and the instance ACTIVE or SHUTOFF with no other request pending (409,
the reason), since the host swaps the filter of a guest it holds.
"""

from __future__ import annotations

from typing import Any

import webob

from etcd_compute.api import policy, validation
from etcd_compute.api.backend import Backend
from etcd_compute.api.handlers import action_checks as checks
from etcd_compute.api.handlers.servers import lookup
from etcd_compute.api.objects import server_security_groups as server_groups
from etcd_compute.api.schemas import server_actions as schema
from etcd_compute.api.views import security_groups as group_view
from etcd_compute.api.views import servers as view
from etcd_compute.api.wsgi import (
    ApiRequest,
    Fault,
    Router,
    bad_request,
    empty_response,
    json_response,
    not_found,
)
from etcd_compute.instances.states import DEFAULT_GROUP


def _group_name(body: dict[str, Any], action: str) -> str:
    """Nova's `_parse` after its schema: a name of spaces is empty."""
    name = body[action]["name"]
    if not name.strip():
        raise bad_request("Security group name cannot be empty")
    return str(name)


def routes(router: Router, api: Backend) -> None:
    router.add("GET", "/servers/{server_id}/os-security-groups",
               lambda req, server_id: index(api, req, server_id))


def index(api: Backend, req: ApiRequest, server_id: str) -> webob.Response:
    if api.neutron is None:  # not served: see the module's docstring
        raise not_found("The resource could not be found.")
    server = lookup(api, req, server_id)
    api.policy.authorize(req.context, policy.SECURITY_GROUPS % "list",
                         {"project_id": server.project_id})
    found, known = server_groups.detailed(api.neutron(req.context), server.uuid)
    return json_response({"security_groups": group_view.groups(found, known)})


def _neutron(api: Backend, req: ApiRequest, server_id: str, action: str,
             name: str) -> webob.Response:
    change = server_groups.add if action == "addSecurityGroup" else server_groups.remove
    try:
        change(api.neutron(req.context), req.context.project_id, server_id, name)
    except server_groups.GroupRefused as exc:
        raise Fault(exc.code, str(exc)) from None
    return empty_response(202)


def _act(api: Backend, req: ApiRequest, server_id: str, body: Any, action: str,
         rule: str) -> webob.Response:
    validation.body(schema.add_security_group if action == "addSecurityGroup"
                    else schema.remove_security_group, body)
    server = checks.server_for(api, req, server_id, policy.SECURITY_GROUPS % rule,
                               locked_ok=True)
    name = _group_name(body, action)
    if api.neutron is not None:
        return _neutron(api, req, server.uuid, action, name)
    if name != DEFAULT_GROUP:
        raise not_found(f"Security group {name[:255]} is not found for project "
                        f"{req.context.project_id}")
    if not api.actions.networked(server):
        raise not_found(f"instance_id {server.uuid} could not be found as device id on any "
                        "ports")
    groups = view.security_groups(server)
    if action == "addSecurityGroup":
        if name in groups:
            return empty_response(202)
        wanted = [*groups, name]
    else:
        if name not in groups:
            raise not_found(f"Security group {name[:255]} not associated with the instance "
                            f"{server.uuid}")
        wanted = [group for group in groups if group != name]
    checks.asked(lambda: api.actions.set_security_groups(server, wanted, checks.caller(req)))
    return empty_response(202)


def add(api: Backend, req: ApiRequest, server_id: str, body: Any) -> webob.Response:
    return _act(api, req, server_id, body, "addSecurityGroup", "add")


def remove(api: Backend, req: ApiRequest, server_id: str, body: Any) -> webob.Response:
    return _act(api, req, server_id, body, "removeSecurityGroup", "remove")

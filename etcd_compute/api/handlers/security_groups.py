"""The servers' security group actions, addSecurityGroup and removeSecurityGroup (Nova's
security groups controller), as Nova answers them in a cloud whose network service has no
such group: there is no network service here, so no security group exists (a server's
traffic is filtered by the hosts against spoofing only, libvirt's `clean-traffic`), and
each is Nova's 404 "Security group X not found." once the body and the server are
checked. Nova echoes a create's asked groups (`default`); it binds none here."""

from __future__ import annotations

from typing import Any

import webob

from etcd_compute.api import policy
from etcd_compute.api.backend import Backend
from etcd_compute.api.handlers import servers as server_handlers
from etcd_compute.api.wsgi import ApiRequest, bad_request, not_found


def _group_name(body: dict[str, Any], action: str) -> str:
    """Nova's `_parse`: the group's name, or its 400s."""
    asked = body[action]
    if not isinstance(asked, dict):
        raise bad_request("Missing parameter dict")
    if "name" not in asked:
        raise bad_request("Security group not specified")
    name = asked["name"]
    if not isinstance(name, str) or not name.strip():
        raise bad_request("Security group name cannot be empty")
    return name


def _act(api: Backend, req: ApiRequest, server_id: str, body: dict[str, Any],
         action: str, rule: str) -> webob.Response:
    server = server_handlers.lookup(api, req, server_id)
    api.policy.authorize(req.context, policy.SECURITY_GROUPS % rule,
                         {"project_id": server.project_id})
    name = _group_name(body, action)
    raise not_found(f"Security group {name[:255]} not found.")


def add(api: Backend, req: ApiRequest, server_id: str, body: Any) -> webob.Response:
    return _act(api, req, server_id, body, "addSecurityGroup", "add")


def remove(api: Backend, req: ApiRequest, server_id: str, body: Any) -> webob.Response:
    return _act(api, req, server_id, body, "removeSecurityGroup", "remove")

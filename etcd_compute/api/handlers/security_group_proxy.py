"""/os-security-groups and /os-security-group-rules: Nova's deprecated proxy to Neutron's
security groups (microversions 2.1 to 2.35; 404 from 2.36, as Nova), under the neutron
backend only (404 under the libvirt backend: its one group is no set of rules).

As Nova's security_groups.py over network/security_group_api.py: the caller's own Neutron
(its token), so Neutron's policy decides; a list is the project's groups (admins:
`all_tenants`), sorted by tenant and name; a group's name and description must be strings
of 1 to 255 characters once stripped (400; kept as given); an id that is no uuid 400
"Security group id should be uuid"; an unknown group 404 "Security group X not found."; a
group in use (Neutron's 409) 400; Neutron's 400 is 400, its 409 on a rule (a quota) 403, as
Nova maps them. A rule is an ingress rule from a CIDR (default `0.0.0.0/0`) or a group, with
Nova's checks of protocol (tcp, udp, icmp) and ports; a CIDR rule without protocol and ports
400 "Not enough parameters to build a valid rule.", one the group has 400 "This rule already
exists in group G".
"""

from __future__ import annotations

import ipaddress
import re
import urllib.parse
from typing import Any

import webob

from etcd_compute.api import policy
from etcd_compute.api.backend import Backend
from etcd_compute.api.views import security_groups as group_view
from etcd_compute.api.wsgi import (
    ApiRequest,
    Fault,
    Router,
    bad_request,
    empty_response,
    json_response,
    not_found,
)
from etcd_compute.errors import NeutronError, NotFound

_UUID = re.compile(r"\A[0-9a-fA-F]{8}-?([0-9a-fA-F]{4}-?){3}[0-9a-fA-F]{12}\Z")
GROUPS, RULES = "security_groups", "security_group_rules"


def routes(router: Router, api: Backend) -> None:
    router.add("GET", "/os-security-groups", lambda req: index(api, req))
    router.add("POST", "/os-security-groups", lambda req: create(api, req))
    router.add("GET", "/os-security-groups/{group_id}",
               lambda req, group_id: show(api, req, group_id))
    router.add("PUT", "/os-security-groups/{group_id}",
               lambda req, group_id: update(api, req, group_id))
    router.add("DELETE", "/os-security-groups/{group_id}",
               lambda req, group_id: delete(api, req, group_id))
    router.add("POST", "/os-security-group-rules", lambda req: create_rule(api, req))
    router.add("DELETE", "/os-security-group-rules/{rule_id}",
               lambda req, rule_id: delete_rule(api, req, rule_id))


def _neutron(api: Backend, req: ApiRequest, rule: str) -> Any:
    """The caller's Neutron, once the route is served and the rule lets the caller."""
    if api.neutron is None or req.version.at_least("2.36"):
        raise not_found("The resource could not be found.")
    api.policy.authorize(req.context, policy.SECURITY_GROUPS % rule,
                         {"project_id": req.context.project_id})
    return api.neutron(req.context)


def _from_body(req: ApiRequest, key: str) -> dict[str, Any]:
    body = req.json_body()
    if not body:
        raise bad_request("The request body can't be empty")
    value = body.get(key) if isinstance(body, dict) else None
    if not isinstance(value, dict):
        raise bad_request(f"Missing parameter {key}")
    return value


def _id(value: Any) -> str:
    if not isinstance(value, str) or not _UUID.match(value):
        raise bad_request("Security group id should be uuid")
    return value


def _property(value: Any, name: str) -> str:
    """The value as given (spaces kept, as Nova keeps them), checked stripped."""
    if not isinstance(value, str):
        raise bad_request(f"Security group {name} is not a string or unicode")
    stripped = value.strip()
    if not 1 <= len(stripped) <= 255:
        raise bad_request(f"{name} has a length of {len(stripped)}: it must be 1 to 255 "
                          "characters")
    return value


def _group(neutron: Any, group_id: str) -> dict[str, Any]:
    try:
        return dict(neutron.security_group(group_id))
    except NotFound:
        raise not_found(f"Security group {group_id} not found.") from None


def _refused(exc: NeutronError, conflict: int = 400) -> Fault:
    if exc.status == 404:
        return not_found(str(exc))
    return Fault(conflict if exc.status == 409 else 400, str(exc))


def _shown(neutron: Any, group: dict[str, Any]) -> dict[str, Any]:
    remote = {r["remote_group_id"] for r in group.get("security_group_rules") or []
              if r.get("remote_group_id")}
    known = {group["id"]: group}
    if remote - set(known):
        known.update({g["id"]: g for g in neutron.security_groups(id=sorted(remote))})
    return group_view.group(group, known)


def index(api: Backend, req: ApiRequest) -> webob.Response:
    neutron = _neutron(api, req, "get")
    every = req.context.is_admin and req.params.get("all_tenants", "0").lower() not in (
        "0", "false", "no", "off")
    found = neutron.security_groups() if every else neutron.security_groups(
        project_id=req.context.project_id)
    known = {g["id"]: g for g in found}
    return json_response({"security_groups": group_view.groups(found, known)})


def show(api: Backend, req: ApiRequest, group_id: str) -> webob.Response:
    neutron = _neutron(api, req, "show")
    return json_response({"security_group": _shown(neutron, _group(neutron, _id(group_id)))})


def create(api: Backend, req: ApiRequest) -> webob.Response:
    neutron = _neutron(api, req, "create")
    asked = _from_body(req, "security_group")
    name = _property(asked.get("name"), "name")
    description = _property(asked.get("description"), "description")
    try:
        made = neutron.create(GROUPS, {"name": name, "description": description})
    except NeutronError as exc:
        raise _refused(exc, conflict=403) from None
    return json_response({"security_group": _shown(neutron, made)})


def update(api: Backend, req: ApiRequest, group_id: str) -> webob.Response:
    neutron = _neutron(api, req, "update")
    group_id = _id(group_id)
    _group(neutron, group_id)
    asked = _from_body(req, "security_group")
    changes = {"name": _property(asked.get("name"), "name"),
               "description": _property(asked.get("description"), "description")}
    try:
        changed = neutron.update(GROUPS, group_id, changes)
    except NeutronError as exc:
        raise _refused(exc) from None
    return json_response({"security_group": _shown(neutron, changed)})


def delete(api: Backend, req: ApiRequest, group_id: str) -> webob.Response:
    neutron = _neutron(api, req, "delete")
    group_id = _id(group_id)
    _group(neutron, group_id)
    try:
        neutron.delete(GROUPS, group_id)
    except NotFound:
        raise not_found(f"Security group {group_id} not found.") from None
    except NeutronError as exc:
        raise _refused(exc) from None  # in use: Nova's 400
    return empty_response(202)


def _cidr(value: Any) -> str:
    if value in (None, ""):
        return "0.0.0.0/0"
    text = urllib.parse.unquote(str(value))
    try:
        ipaddress.ip_network(text, strict=False)
    except ValueError:
        raise bad_request(f"{text[:64]} is not a valid IP network.") from None
    return text


def ingress_rule(protocol: Any, from_port: Any, to_port: Any, group_id: str | None,
                 cidr: str | None) -> dict[str, Any] | None:
    """Nova's `_new_ingress_rule`: the rule's protocol and ports checked; None when a CIDR
    rule lacks them."""
    upper = str(protocol).upper() if protocol else ""
    if group_id and from_port is None and to_port is None:  # a group rule opens all
        from_port, to_port = {"ICMP": (-1, -1), "TCP": (1, 65535),
                              "UDP": (1, 65535)}.get(upper, (None, None))
    if not (protocol and from_port is not None and to_port is not None):
        return None if cidr else {}
    try:
        low, high = int(from_port), int(to_port)
    except (TypeError, ValueError):
        raise bad_request("Type and Code must be integers for ICMP protocol type"
                          if upper == "ICMP" else "To and From ports must be integers") from None
    if upper not in ("TCP", "UDP", "ICMP"):
        raise bad_request(f"Invalid IP protocol {str(protocol)[:32]}.")
    if upper in ("TCP", "UDP") and low > high:
        raise bad_request(f"Invalid port range {low}:{high}. Former value cannot be greater "
                          "than the later")
    if upper in ("TCP", "UDP") and (low < 1 or high > 65535):
        raise bad_request(f"Invalid port range {low}:{high}. Valid {upper} ports should be "
                          "between 1-65535")
    if upper == "ICMP" and not (-1 <= low <= 255 and -1 <= high <= 255):
        raise bad_request(f"Invalid port range {low}:{high}. For ICMP, the type:code must "
                          "be valid")
    return {"protocol": str(protocol).lower(), "from_port": low, "to_port": high}


def create_rule(api: Backend, req: ApiRequest) -> webob.Response:
    neutron = _neutron(api, req, "rule:create")
    asked = _from_body(req, "security_group_rule")
    parent = _group(neutron, _id(asked.get("parent_group_id")))
    group_id = asked.get("group_id")
    cidr = None
    if group_id is not None:
        group_id = _group(neutron, _id(group_id))["id"]
    else:
        cidr = _cidr(asked.get("cidr"))
    ports = ingress_rule(asked.get("ip_protocol"), asked.get("from_port"),
                         asked.get("to_port"), group_id, cidr)
    if ports is None:
        raise bad_request("Not enough parameters to build a valid rule.")
    if cidr is not None:
        address, _, prefix = cidr.partition("/")  # as written (Nova's get_net_and_prefixlen)
        if prefix == "0" and address not in ("0.0.0.0", "::"):
            raise bad_request(f"Bad prefix for network in cidr {cidr}")
    rule: dict[str, Any] = {"security_group_id": parent["id"], "direction": "ingress",
                            "ethertype": "IPv6" if cidr and ":" in cidr else "IPv4"}
    if ports:
        rule["protocol"] = ports["protocol"]
        if ports["from_port"] != -1:
            rule["port_range_min"] = ports["from_port"]
        if ports["to_port"] != -1:
            rule["port_range_max"] = ports["to_port"]
    if group_id:
        rule["remote_group_id"] = group_id
    else:
        rule["remote_ip_prefix"] = cidr
    keys = ("protocol", "port_range_min", "port_range_max", "remote_group_id",
            "remote_ip_prefix")
    if any(r.get("direction") == "ingress" and all(r.get(k) == rule.get(k) for k in keys)
           for r in parent.get("security_group_rules") or []):
        raise bad_request(f"This rule already exists in group {parent['id']}")
    try:
        made = neutron.create(RULES, rule)
    except NeutronError as exc:
        raise _refused(exc, conflict=403) from None
    known = {parent["id"]: parent}
    if group_id:
        known[group_id] = _group(neutron, group_id)
    return json_response({"security_group_rule": group_view.rule(made, known)})


def delete_rule(api: Backend, req: ApiRequest, rule_id: str) -> webob.Response:
    neutron = _neutron(api, req, "rule:delete")
    rule_id = _id(rule_id)
    try:
        neutron.security_group_rule(rule_id)
        neutron.delete(RULES, rule_id)
    except NotFound:
        raise not_found(f"Security group rule {rule_id} not found.") from None
    except NeutronError as exc:
        raise _refused(exc) from None
    return empty_response(202)

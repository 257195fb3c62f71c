"""A server's security groups under the neutron backend: Neutron's groups on its ports, as
Nova's network/security_group_api.py reads and changes them, with the caller's Neutron.

`detailed` gives the groups (with their rules) of a server's ports; `names` the group names
of a page of servers (one request more than its ports); `add` and `remove` change every
port of the server, as Nova's `add_to_instance` and `remove_from_instance` do. Refusals
carry Nova's code and message (`GroupRefused`).
"""

from __future__ import annotations

import re
from typing import Any

from etcd_compute.api.objects.server_ports import ServerPorts
from etcd_compute.errors import NeutronError

# What Neutron takes in one list request's ids.
_IDS = 50
_UUID = re.compile(r"\A[0-9a-fA-F]{8}(-[0-9a-fA-F]{4}){3}-[0-9a-fA-F]{12}\Z")


class GroupRefused(Exception):
    """`code` is Nova's status: 404 (SecurityGroupNotFound), 409 (NoUniqueMatch), 400."""

    def __init__(self, message: str, code: int = 404):
        super().__init__(message)
        self.code = code


def _by_ids(neutron: Any, ids: list[str], fields: list[str] | None = None
            ) -> dict[str, dict[str, Any]]:
    found: dict[str, dict[str, Any]] = {}
    for start in range(0, len(ids), _IDS):
        filters: dict[str, Any] = {"id": ids[start:start + _IDS]}
        if fields:
            filters["fields"] = fields
        found.update({g["id"]: g for g in neutron.security_groups(**filters)})
    return found


def _group_ids(ports: list[dict[str, Any]]) -> list[str]:
    return list(dict.fromkeys(g for port in ports for g in port.get("security_groups") or []))


def names(neutron: Any, ports: ServerPorts) -> dict[str, list[str]]:
    """{server: [group name, ...]} of the servers whose ports `ports` holds (a group the
    caller does not see is left out, a group without a name is named by its id)."""
    groups = _by_ids(neutron, _group_ids(ports.ports), ["id", "name"])
    shown: dict[str, list[str]] = {}
    for port in ports.ports:
        for group_id in port.get("security_groups") or []:
            if group_id in groups:
                shown.setdefault(port["device_id"], []).append(
                    groups[group_id].get("name") or group_id)
    return shown


def detailed(neutron: Any, server_uuid: str) -> tuple[list[dict[str, Any]],
                                                      dict[str, dict[str, Any]]]:
    """The groups of the server's ports (each once, with its rules), and the groups their
    rules name as remote groups, those the caller sees (Nova skips a rule of one it does
    not)."""
    ports = ServerPorts.of(neutron, [server_uuid], names=False).ports
    groups = list(_by_ids(neutron, _group_ids(ports)).values())
    known = {g["id"]: g for g in groups}
    remote = sorted({r["remote_group_id"] for g in groups
                     for r in g.get("security_group_rules") or []
                     if r.get("remote_group_id") and r["remote_group_id"] not in known})
    if remote:
        known.update(_by_ids(neutron, remote, ["id", "name", "project_id", "tenant_id"]))
    return groups, known


def _find(neutron: Any, project_id: str, name: str) -> str:
    """Nova's `find_resourceid_by_name_or_id`: a group the caller sees by its id, else the
    project's one group of that name."""
    if len(name) > 255:  # longer than any name Neutron keeps: never asked
        raise GroupRefused(f"Security group {name[:255]} is not found for project "
                           f"{project_id}")
    # Neutron refuses an id filter that is not a uuid (filter validation).
    by_id = neutron.security_groups(id=name, fields=["id"]) if _UUID.match(name) else []
    if by_id:
        return str(by_id[0]["id"])
    found = neutron.security_groups(name=name, project_id=project_id, fields=["id"])
    if len(found) > 1:
        raise GroupRefused(f"Multiple security_group matches found for name '{name}', use "
                           "an ID to be more specific.", 409)
    if not found:
        raise GroupRefused(f"Security group {name} is not found for project {project_id}")
    return str(found[0]["id"])


def _ports(neutron: Any, server_uuid: str) -> list[dict[str, Any]]:
    ports = neutron.ports(device_id=server_uuid)
    if not ports:
        raise GroupRefused(f"instance_id {server_uuid} could not be found as device id on "
                           "any ports")
    return list(ports)


def _update(neutron: Any, port: dict[str, Any], groups: list[str]) -> None:
    try:
        neutron.update_port(port["id"], {"security_groups": groups})
    except NeutronError as exc:
        if exc.status == 400:
            raise GroupRefused(str(exc), 400) from None
        if exc.status == 409:
            raise GroupRefused("Cannot apply both stateful and stateless security groups "
                               "on the same port.", 409) from None
        raise


def add(neutron: Any, project_id: str, server_uuid: str, name: str) -> None:
    group = _find(neutron, project_id, name)
    for port in _ports(neutron, server_uuid):
        has_ip = port.get("fixed_ips") or port.get("ip_allocation") == "deferred"
        if not (has_ip and port.get("port_security_enabled", True)):
            raise GroupRefused("Network requires port_security_enabled and subnet "
                               "associated in order to apply security groups.", 400)
        groups = list(port.get("security_groups") or [])
        if group not in groups:  # Neutron keeps a port's groups a set
            _update(neutron, port, [*groups, group])


def remove(neutron: Any, project_id: str, server_uuid: str, name: str) -> None:
    group = _find(neutron, project_id, name)
    found = False
    for port in _ports(neutron, server_uuid):
        groups = list(port.get("security_groups") or [])
        if group not in groups:
            continue
        _update(neutron, port, [g for g in groups if g != group])
        found = True
    if not found:
        raise GroupRefused(f"Security group {name} not associated with the instance "
                           f"{server_uuid}")

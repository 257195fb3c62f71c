"""What a create asks of Neutron, checked before anything is claimed (the neutron backend):
Nova's `validate_networks` (nova/network/neutron.py) and its security groups' lookup, with
the caller's own token, so Neutron shows the caller what it may use and nothing else.

`networks(...)` gives the list the instance spec carries (`networks`: items {"uuid"},
{"port"} or {"uuid", "fixed_ip"}; None for `none`); `servers_allowed(...)` how many servers
the project's port quota leaves room for; `security_group_ids(...)` the groups' ids the
ports are made with. A refusal is a `NetworkRequestRefused` with Nova's code and
message (its exception of that name).
"""

from __future__ import annotations

import ipaddress
import uuid as uuidlib
from typing import Any

from etcd_compute.errors import NotFound
from etcd_compute.neutron import matching_groups


class NetworkRequestRefused(Exception):
    """A request Neutron cannot serve: `code` is Nova's HTTP status for it at create."""

    code = 400

    def __init__(self, message: str, code: int | None = None):
        super().__init__(message)
        if code is not None:
            self.code = code


class NetworkNotFound(NetworkRequestRefused):
    def __init__(self, network_id: str):
        super().__init__(f"Network {network_id} could not be found.")


class PortNotFound(NetworkRequestRefused):
    def __init__(self, port_id: str):
        super().__init__(f"Port id {port_id} could not be found.")


class PortInUse(NetworkRequestRefused):
    code = 409

    def __init__(self, port_id: str):
        super().__init__(f"Port {port_id} is still in use.")


class Ambiguous(NetworkRequestRefused):
    """Nova's NetworkAmbiguous and NoUniqueMatch: 409."""

    code = 409


class PortLimitExceeded(NetworkRequestRefused):
    """Nova's PortLimitExceeded: 403."""

    code = 403

    def __init__(self, message: str = "Maximum number of ports exceeded"):
        super().__init__(message)


class SecurityGroupNotFound(NetworkRequestRefused):
    def __init__(self, group: str):
        super().__init__(f"Security group {group} not found.")


AMBIGUOUS = ("Multiple possible networks found, use a Network ID to be more specific.")


def _available(neutron: Any, project_id: str) -> list[dict[str, Any]]:
    """Nova's `_get_available_networks` without ids: the project's own networks that are
    not shared, then the shared ones."""
    return (neutron.networks(project_id=project_id, shared=False) +
            neutron.networks(shared=True))


def networks(neutron: Any, project_id: str, asked: Any, count: int = 1,
             external_ok: bool = False) -> list[dict[str, Any]] | None:
    """The spec's `networks` for `asked` (absent, "auto", "none" or Nova's list), as
    `neutron` (the caller's client) shows it; None: no network interface. `external_ok`:
    the caller may attach to an external network that is not shared (Nova's
    `network:attach_external_network`, admins by default): else 403, as Nova answers."""
    if asked == "none":
        return None
    if asked is None or asked == "auto" or asked == []:
        return _auto(neutron, project_id, explicit=asked == "auto")
    _check_many(asked, count)
    wanted: list[dict[str, Any]] = []
    net_ids: list[str] = []
    port_nets: list[str] = []
    for item in asked:
        if item.get("port"):
            port = _port(neutron, item["port"])
            wanted.append({"port": port["id"]})
            port_nets.append(port["network_id"])
            continue
        net_id = str(uuidlib.UUID(item["uuid"]))  # Neutron's form (checked by the handler)
        net_ids.append(net_id)
        wanted.append({"uuid": net_id, **({"fixed_ip": _address(item["fixed_ip"])}
                                          if item.get("fixed_ip") else {})})
    every = sorted(set(net_ids + port_nets))
    found = {net["id"]: net for net in neutron.networks(id=every)} if every else {}
    for net in found.values():
        if net.get("router:external") and not net.get("shared") and not external_ok:
            raise NetworkRequestRefused("It is not allowed to create an interface on "
                                        f"external network {net['id']}", 403)
    for net in (found[net_id] for net_id in dict.fromkeys(net_ids) if net_id in found):
        if not net.get("subnets"):
            raise NetworkRequestRefused(f"Network {net['id']} requires a subnet in order to "
                                        "boot instances on.")
    lost = [net_id for net_id in dict.fromkeys(net_ids) if net_id not in found]
    if lost:
        raise NetworkNotFound(", ".join(lost))
    for item in wanted:  # shown to the caller, not the project's own nor shared: its host
        net = found.get(item.get("uuid", ""))  # uses it as Nova does with the user's token
        if net is not None and net.get("project_id") != project_id and not net.get("shared"):
            item["caller_sees"] = True
    for item in wanted:
        if item.get("fixed_ip"):
            _check_fixed_ip(neutron, item["uuid"], item["fixed_ip"])
    return wanted


def servers_allowed(neutron: Any, project_id: str, wanted: list[dict[str, Any]] | None,
                    count: int) -> int:
    """How many of `count` servers on `wanted` the project's free ports allow, as Nova's
    `validate_networks` counts them: a network asked for is a port to make per server (a
    port given is none), against Neutron's port quota less the project's ports. A project
    over its quota already is refused in Nova's words."""
    per_server = sum(1 for item in wanted or [] if not item.get("port"))
    if not per_server:
        return count
    quota = neutron.port_quota(project_id)
    if quota == -1:
        return count
    used = len(neutron.ports(project_id=project_id, fields="id"))
    free = quota - used
    if free < 0:
        raise PortLimitExceeded(f"The number of defined ports: {used} is over the limit: "
                                f"{quota}")
    return count if free >= per_server * count else free // per_server


def _auto(neutron: Any, project_id: str, explicit: bool) -> list[dict[str, Any]] | None:
    """Nova's auto: the one network available, 409 if several; none available is a server
    without a network interface when nothing was asked (before 2.37, as Nova boots it), and
    400 for "auto" (there is no auto-allocated topology here)."""
    found = _available(neutron, project_id)
    if len(found) > 1:
        raise Ambiguous(AMBIGUOUS)
    if not found:
        if explicit:
            raise NetworkRequestRefused("Unable to automatically allocate a network for "
                                        f"project {project_id}")
        return None
    return [{"uuid": found[0]["id"]}]


def _check_many(asked: list[dict[str, Any]], count: int) -> None:
    """Nova's checks of a request for several servers, and of a port given twice."""
    ports = [item["port"] for item in asked if item.get("port")]
    if count > 1 and ports:
        raise NetworkRequestRefused(
            "Failed to launch instances: Unable to launch multiple instances with a single "
            "configured port ID. Please launch your instance one by one with different "
            "ports.")
    if count > 1 and any(item.get("fixed_ip") for item in asked):
        raise NetworkRequestRefused("Failed to launch instances: max_count cannot be greater "
                                    "than 1 if an fixed_ip is specified.")


def _port(neutron: Any, port_id: str) -> dict[str, Any]:
    """The port, if the caller sees it and no server has it."""
    try:
        port = neutron.port(port_id)
    except NotFound:
        raise PortNotFound(port_id) from None
    if port.get("device_id"):
        raise PortInUse(port_id)
    if not port.get("fixed_ips") and port.get("ip_allocation") not in ("deferred", "none"):
        raise NetworkRequestRefused(f"Port {port_id} requires a FixedIP in order to be used.")
    return port


def _address(address: str) -> str:
    """An IP address in its canonical form; 400 for a scoped one (`fe80::1%eth0`) or
    anything else the schema let through."""
    try:
        ip = ipaddress.ip_address(address)
    except ValueError:
        ip = None
    if ip is None or getattr(ip, "scope_id", None):
        raise NetworkRequestRefused(f"{address} is not a valid IP v4/6 address.")
    return str(ip)


def _check_fixed_ip(neutron: Any, network_id: str, address: str) -> None:
    """The address is in one of the network's subnets and no port has it (Nova leaves the
    first to Neutron's port create, the server then ends in ERROR; refused here at once)."""
    ip = ipaddress.ip_address(address)
    subnets = neutron.subnets(network_id=network_id)
    if not any(ip in ipaddress.ip_network(s["cidr"], strict=False) for s in subnets):
        raise NetworkRequestRefused(f"Fixed IP address {address} is not in a subnet of "
                                    f"network {network_id}.")
    taken = neutron.ports(network_id=network_id, fixed_ips=f"ip_address={address}",
                          fields="device_id")
    if taken:
        raise NetworkRequestRefused(f"Fixed IP address {address} is already in use on "
                                    f"instance {taken[0].get('device_id') or ''}.")


def security_group_ids(neutron: Any, project_id: str, asked: list[str]) -> list[str]:
    """The ids of the groups `asked` names (a name or an id, of the project's groups), as
    Nova's `_process_security_groups`: a name two groups have is 409, none 400."""
    if not asked:
        return []
    groups = neutron.security_groups(project_id=project_id, fields=["id", "name"])
    ids = []
    for wanted in asked:
        match = matching_groups(groups, wanted)
        if len(match) > 1:
            raise Ambiguous(f"Multiple security groups found matching '{wanted}'. Use an ID "
                            "to be more specific.")
        if not match:
            raise SecurityGroupNotFound(wanted)
        ids.append(match[0])
    return list(dict.fromkeys(ids))

"""What a create asks for its network: its `networks` and `security_groups`, checked before
anything is claimed (Nova's `_get_requested_networks`, then its `validate_networks`).

The libvirt backend: every guest is on its host's network, named by its id in os-networks;
"auto", "none", that one network and the `default` group are what there is. A network by
another uuid, a port or a fixed IP is refused in one line (network_backend).

The neutron backend: the networks, ports and fixed IPs, and the security groups by name or
id, as the caller's Neutron shows them (`objects/requested_networks.py`, Nova's errors and
codes); what passed goes to the instance spec, whose host makes the ports.
"""

from __future__ import annotations

import dataclasses
import re
from dataclasses import dataclass
from typing import Any

from etcd_compute import network_backend
from etcd_compute.api import policy
from etcd_compute.api.backend import Backend
from etcd_compute.api.handlers.networks import network_id
from etcd_compute.api.objects import requested_networks
from etcd_compute.api.wsgi import ApiRequest, Fault, bad_request

# What an instance spec carries at most (its schema's maxItems).
MAX_NICS = MAX_GROUPS = 16
_UUID = re.compile(r"\A[0-9a-fA-F]{8}-?([0-9a-fA-F]{4}-?){3}[0-9a-fA-F]{12}\Z")


@dataclass
class Requested:
    """What the instance spec gets: `network` False for none; under the neutron backend
    the checked `networks` and the security group ids (None: the project's default)."""

    network: bool = True
    networks: list[dict[str, str]] | None = None
    security_groups: list[str] | None = None
    # How many of the servers asked for the project's free ports allow (Nova's
    # `max_net_count`): the create makes no more.
    servers: int = 1


def _check_format(networks: Any) -> None:
    """Nova's `_get_requested_networks`: a port once, not with a fixed IP, a network by a
    uuid; device tags are not served here (refused, never ignored)."""
    if not isinstance(networks, list):
        return
    if len(networks) > MAX_NICS:
        raise bad_request(f"At most {MAX_NICS} networks or ports per server here")
    ports: set[str] = set()
    for item in networks:
        port = item.get("port")
        if item.get("tag") is not None:
            raise bad_request("Device tags are not supported")
        if port:
            if port in ports:
                raise bad_request(f"Port ID '{port}' was specified twice: you cannot attach "
                                  "a port multiple times.")
            if item.get("fixed_ip") is not None:
                raise bad_request(f"Specified Fixed IP '{item['fixed_ip']}' cannot be used "
                                  f"with port '{port}': the two cannot be specified together.")
            ports.add(port)
            continue
        if "uuid" not in item:
            raise bad_request("Bad network format: missing 'uuid'")
        if not _UUID.match(str(item["uuid"])):
            raise bad_request("Bad networks format: network uuid is not in proper format "
                              f"({str(item['uuid'])[:64]})")


def _libvirt(api: Backend, asked: dict[str, Any]) -> Requested:
    networks = asked.get("networks")
    ours = [{"uuid": network_id(api.settings["network_name"])}]
    if isinstance(networks, list) and networks and networks != ours:
        network_backend.refuse_unless_neutron(api.config, "networks by uuid (other than "
                                              f"{ours[0]['uuid']}), ports or fixed IPs")
    for group in asked.get("security_groups") or []:
        if group.get("name") != "default":
            raise bad_request(f"Security group {str(group.get('name'))[:255]} not found.")
    return Requested(network=networks != "none")


def requested(api: Backend, req: ApiRequest, asked: dict[str, Any], count: int,
              min_count: int = 1) -> Requested:
    """The create's network for `min_count` to `count` servers, checked: 400/409 as Nova
    answers, 403 when the project's free ports are too few for `min_count` servers."""
    networks = asked.get("networks")
    _check_format(networks)
    if api.neutron is None:
        return dataclasses.replace(_libvirt(api, asked), servers=count)
    if networks not in (None, "none", []):
        api.policy.authorize(req.context, policy.SERVERS % "create:attach_network",
                             {"project_id": req.context.project_id})
    names = list(dict.fromkeys(str(group.get("name"))
                               for group in asked.get("security_groups") or []))
    if len(names) > MAX_GROUPS:
        raise bad_request(f"At most {MAX_GROUPS} security groups per server here")
    neutron = api.neutron(req.context)
    project = req.context.project_id
    try:
        wanted = requested_networks.networks(
            neutron, project, networks, count,
            external_ok=api.policy.allows(req.context, policy.ATTACH_EXTERNAL_NETWORK,
                                          {"project_id": project}))
        # `default` alone is what Neutron gives a port made without groups (Nova's too).
        groups = None if names in ([], ["default"]) else \
            requested_networks.security_group_ids(neutron, project, names)
        servers = requested_networks.servers_allowed(neutron, project, wanted, count)
        if servers < min_count:
            raise requested_networks.PortLimitExceeded()
    except requested_networks.NetworkRequestRefused as exc:
        raise Fault(exc.code, str(exc)) from None
    return Requested(network=wanted is not None, networks=wanted, security_groups=groups,
                     servers=servers)

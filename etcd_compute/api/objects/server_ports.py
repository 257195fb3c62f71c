"""Servers' Neutron ports (the neutron backend): those whose `device_id` is the server, as
the caller's Neutron shows them, read once for a whole page of servers (one request for the
ports, one for their networks' names, one for their floating IPs), as Nova's network info
reads them."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from etcd_compute.neutron import IDS_PER_QUERY, floating_addresses


@dataclass
class ServerPorts:
    ports: list[dict[str, Any]] = field(default_factory=list)
    # The ports' networks by id (what the caller sees of them).
    networks: dict[str, dict[str, Any]] = field(default_factory=dict)
    # The floating IP addresses of each port (with `names`).
    floating: dict[str, list[str]] = field(default_factory=dict)

    @classmethod
    def of(cls, neutron: Any, server_uuids: list[str], names: bool = True) -> ServerPorts:
        """The ports of `server_uuids` (and, with `names`, their networks and floating
        IPs)."""
        if not server_uuids:
            return cls()
        ports = neutron.ports(device_id=list(dict.fromkeys(server_uuids)))
        net_ids = sorted({port["network_id"] for port in ports}) if names else []
        networks: dict[str, dict[str, Any]] = {}
        for start in range(0, len(net_ids), IDS_PER_QUERY):  # a query string stays short
            networks.update({net["id"]: net for net in
                             neutron.networks(id=net_ids[start:start + IDS_PER_QUERY])})
        floating = floating_addresses(neutron, [port["id"] for port in ports]) if names else {}
        return cls(ports, networks, floating)

    def of_server(self, server_uuid: str) -> list[dict[str, Any]]:
        return [port for port in self.ports if port.get("device_id") == server_uuid]

    def network_name(self, network_id: str) -> str:
        """The network's name (Nova's label), its id when it has none or is not seen."""
        return str((self.networks.get(network_id) or {}).get("name") or network_id)

"""A server's Neutron ports as Nova shows them (the neutron backend): its `addresses` (Nova's
views/ips.py over its network info: the network's name as the label, each fixed IP then
floating IP with its version, type and the port's MAC) and an os-interface attachment (Nova's
attach_interfaces.py `_translate_interface_attachment_view`)."""

from __future__ import annotations

import ipaddress
from collections.abc import Callable
from typing import Any


def addresses(ports: list[dict[str, Any]], label: Callable[[str], str],
              floating: dict[str, list[str]] | None = None
              ) -> dict[str, list[dict[str, Any]]]:
    """{network name: [address, ...]} of the ports, in the ports' order: each port's fixed
    IPs, then its floating IPs (`floating`: by port id)."""
    shown: dict[str, list[dict[str, Any]]] = {}
    for port in ports:
        found = shown.setdefault(label(port["network_id"]), [])
        for kind, address in [*(("fixed", f["ip_address"]) for f in port.get("fixed_ips") or []),
                              *(("floating", a) for a in (floating or {}).get(port["id"], []))]:
            found.append({"version": ipaddress.ip_address(address).version, "addr": address,
                          "OS-EXT-IPS:type": kind,
                          "OS-EXT-IPS-MAC:mac_addr": port.get("mac_address")})
    return shown


def ips(shown: dict[str, list[dict[str, Any]]]) -> dict[str, list[dict[str, Any]]]:
    """/servers/{id}/ips: version and addr only (Nova's extend_address=False)."""
    return {label: [{"version": a["version"], "addr": a["addr"]} for a in found]
            for label, found in shown.items()}


def interface(port: dict[str, Any], show_tag: bool = False) -> dict[str, Any]:
    shown = {"net_id": port["network_id"], "port_id": port["id"],
             "mac_addr": port.get("mac_address"), "port_state": port.get("status"),
             "fixed_ips": [{"subnet_id": f.get("subnet_id"), "ip_address": f["ip_address"]}
                           for f in port.get("fixed_ips") or []]}
    if show_tag:
        shown["tag"] = None  # device tags are not served here
    return shown

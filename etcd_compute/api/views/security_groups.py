"""Neutron's security groups as Nova's os-security-groups proxy shows them (its
security_groups.py `_format_security_group` over security_group_api's conversion): id,
name, description, tenant_id, and the ingress rules in Nova's shape, sorted by tenant and
name."""

from __future__ import annotations

from typing import Any


def _ports(rule: dict[str, Any]) -> tuple[Any, Any]:
    """Nova's from_port/to_port: a protocol without a range is all of its ports."""
    low, high = rule.get("port_range_min"), rule.get("port_range_max")
    protocol = rule.get("protocol")
    if protocol and low is None and high is None:
        return (1, 65535) if str(protocol).upper() in ("TCP", "UDP") else (-1, -1)
    return low, high


def rule(found: dict[str, Any], groups: dict[str, dict[str, Any]]) -> dict[str, Any] | None:
    """One ingress rule; None for one naming a remote group the caller does not see."""
    from_port, to_port = _ports(found)
    shown: dict[str, Any] = {"id": found["id"], "parent_group_id": found["security_group_id"],
                             "ip_protocol": found.get("protocol"), "from_port": from_port,
                             "to_port": to_port, "group": {}, "ip_range": {}}
    remote = found.get("remote_group_id")
    if remote:
        if remote not in groups:
            return None
        shown["group"] = {"name": groups[remote].get("name"),
                          "tenant_id": groups[remote].get("project_id",
                                                          groups[remote].get("tenant_id"))}
    else:
        shown["ip_range"] = {"cidr": found.get("remote_ip_prefix") or "0.0.0.0/0"}
    return shown


def group(found: dict[str, Any], groups: dict[str, dict[str, Any]]) -> dict[str, Any]:
    rules = [rule(r, groups) for r in found.get("security_group_rules") or []
             if r.get("direction") == "ingress"]
    return {"id": found["id"], "name": found.get("name"),
            "description": found.get("description"),
            "tenant_id": found.get("project_id", found.get("tenant_id")),
            "rules": [r for r in rules if r is not None]}


def groups(found: list[dict[str, Any]], known: dict[str, dict[str, Any]]
           ) -> list[dict[str, Any]]:
    shown = [group(g, known) for g in found]
    return sorted(shown, key=lambda g: (g["tenant_id"] or "", g["name"] or ""))

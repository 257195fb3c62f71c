"""Neutron's groups in Nova's os-security-groups shape."""

from __future__ import annotations

from etcd_compute.api.views import security_groups as view


def rule(**fields):
    return {"id": "r", "security_group_id": "g", "direction": "ingress", "protocol": None,
            "port_range_min": None, "port_range_max": None, "remote_group_id": None,
            "remote_ip_prefix": None, **fields}


def test_rules_in_novas_shape() -> None:
    assert view.rule(rule(protocol="udp"), {})["from_port"] == 1
    assert view.rule(rule(protocol="udp"), {})["to_port"] == 65535
    assert view.rule(rule(protocol="tcp", port_range_min=80, port_range_max=81), {})[
        "ip_range"] == {"cidr": "0.0.0.0/0"}
    assert view.rule(rule(remote_group_id="gone"), {}) is None
    assert view.rule(rule(remote_group_id="o"), {"o": {"name": "o", "project_id": "p"}})[
        "group"] == {"name": "o", "tenant_id": "p"}


def test_groups_sorted_by_tenant_and_name_with_ingress_rules_only() -> None:
    found = [{"id": "2", "name": "b", "description": "", "project_id": "p",
              "security_group_rules": [rule(direction="egress")]},
             {"id": "1", "name": "a", "description": "d", "project_id": "p",
              "security_group_rules": [rule()]}]
    shown = view.groups(found, {})
    assert [g["name"] for g in shown] == ["a", "b"]
    assert shown[1]["rules"] == [] and len(shown[0]["rules"]) == 1

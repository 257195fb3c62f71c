"""/os-security-groups and /os-security-group-rules: Nova's proxy to Neutron's groups
(to 2.35), over the in-memory Neutron, with Nova's checks and answers."""

from __future__ import annotations

import pytest

from etcd_compute.api.handlers.security_group_proxy import ingress_rule
from tests.unit.api.harness import Harness
from tests.unit.fake_neutron import FakeNeutron

GROUPS, RULES = "/v2.1/os-security-groups", "/v2.1/os-security-group-rules"


@pytest.fixture
def proxy() -> tuple[Harness, FakeNeutron]:
    neutron = FakeNeutron()
    return Harness.new(neutron=neutron), neutron


def test_create_list_show_update_delete_as_nova(proxy):
    harness, neutron = proxy
    neutron.add_group("p2", "theirs")
    answer = harness.call("POST", GROUPS, {"security_group": {"name": " web ",
                                                              "description": "ssh"}})
    assert answer.status_int == 200, answer.text
    made = answer.json["security_group"]
    assert (made["name"], made["description"], made["tenant_id"], made["rules"]) == (
        " web ", "ssh", "p1", [])  # spaces kept, as Nova keeps them
    listed = harness.call("GET", GROUPS).json["security_groups"]
    assert [g["name"] for g in listed] == [" web "]  # not another project's
    assert len(harness.admin("GET", f"{GROUPS}?all_tenants=1").json["security_groups"]) == 2
    assert harness.call("GET", f"{GROUPS}/{made['id']}").json["security_group"] == made
    changed = harness.call("PUT", f"{GROUPS}/{made['id']}", {"security_group": {
        "name": "www", "description": "http"}}).json["security_group"]
    assert (changed["name"], changed["description"]) == ("www", "http")
    assert harness.call("DELETE", f"{GROUPS}/{made['id']}").status_int == 202
    answer = harness.call("GET", f"{GROUPS}/{made['id']}")
    assert (answer.status_int, answer.json["itemNotFound"]["message"]) == (
        404, f"Security group {made['id']} not found.")


@pytest.mark.parametrize("body", [None, {}, {"security_group": None},
                                  {"security_group": {"name": "x"}},
                                  {"security_group": {"name": "", "description": "d"}},
                                  {"security_group": {"name": "  ", "description": "d"}},
                                  {"security_group": {"name": 7, "description": "d"}},
                                  {"security_group": {"name": "x" * 256, "description": "d"}}])
def test_a_bad_group_is_400_and_makes_nothing(proxy, body):
    harness, neutron = proxy
    assert harness.call("POST", GROUPS, body).status_int == 400
    assert neutron.items["security_groups"] == {}


def test_an_id_that_is_no_uuid_is_400_an_unknown_one_404(proxy):
    harness, _ = proxy
    for method in ("GET", "DELETE"):
        answer = harness.call(method, f"{GROUPS}/nope")
        assert (answer.status_int, answer.json["badRequest"]["message"]) == (
            400, "Security group id should be uuid")
        assert harness.call(method, f"{GROUPS}/{'1' * 32}").status_int == 404
    assert harness.call("DELETE", f"{RULES}/{'1' * 32}").status_int == 404


def test_a_group_in_use_is_400_a_reader_cannot_create(proxy):
    harness, neutron = proxy
    group = neutron.add_group("p1", "used")
    neutron.add_port(neutron.add_network("p1"), security_groups=[group["id"]])
    assert harness.call("DELETE", f"{GROUPS}/{group['id']}").status_int == 400
    assert harness.call("POST", GROUPS, {"security_group": {
        "name": "a", "description": "b"}}, roles=("reader",)).status_int == 403


def test_not_served_from_2_36_nor_under_the_libvirt_backend(proxy):
    harness, _ = proxy
    assert harness.call("GET", GROUPS, version="2.36").status_int == 404
    assert Harness.new().call("GET", GROUPS).status_int == 404


def test_rules_are_made_shown_in_their_group_and_deleted(proxy):
    harness, neutron = proxy
    group, other = neutron.add_group("p1", "web"), neutron.add_group("p1", "db")
    answer = harness.call("POST", RULES, {"security_group_rule": {
        "parent_group_id": group["id"], "ip_protocol": "tcp", "from_port": 22,
        "to_port": 22, "cidr": "10.0.0.0/8"}})
    assert answer.status_int == 200, answer.text
    rule = answer.json["security_group_rule"]
    assert {k: rule[k] for k in ("parent_group_id", "ip_protocol", "from_port", "to_port",
                                 "ip_range", "group")} == {
        "parent_group_id": group["id"], "ip_protocol": "tcp", "from_port": 22, "to_port": 22,
        "ip_range": {"cidr": "10.0.0.0/8"}, "group": {}}
    by_group = harness.call("POST", RULES, {"security_group_rule": {
        "parent_group_id": group["id"], "ip_protocol": "icmp",
        "group_id": other["id"]}}).json["security_group_rule"]
    assert (by_group["from_port"], by_group["to_port"], by_group["group"]) == (
        -1, -1, {"name": "db", "tenant_id": "p1"})
    shown = harness.call("GET", f"{GROUPS}/{group['id']}").json["security_group"]
    assert sorted(r["id"] for r in shown["rules"]) == sorted([rule["id"], by_group["id"]])
    again = harness.call("POST", RULES, {"security_group_rule": {
        "parent_group_id": group["id"], "ip_protocol": "tcp", "from_port": 22,
        "to_port": 22, "cidr": "10.0.0.0/8"}})
    assert (again.status_int, again.json["badRequest"]["message"]) == (
        400, f"This rule already exists in group {group['id']}")  # Nova's own check
    assert harness.call("DELETE", f"{RULES}/{rule['id']}").status_int == 202
    assert harness.call("DELETE", f"{RULES}/{rule['id']}").status_int == 404


@pytest.mark.parametrize("rule", [
    {"ip_protocol": "tcp", "from_port": 22, "to_port": 21},
    {"ip_protocol": "tcp", "from_port": 0, "to_port": 22},
    {"ip_protocol": "udp", "from_port": 1, "to_port": 65536},
    {"ip_protocol": "icmp", "from_port": 256, "to_port": 0},
    {"ip_protocol": "tcp", "from_port": "x", "to_port": 22},
    {"ip_protocol": "gre", "from_port": 1, "to_port": 2},
    {"ip_protocol": "tcp", "from_port": 22, "to_port": 22, "cidr": "10.0.0.300/8"},
    {"ip_protocol": "tcp", "from_port": 22, "to_port": 22, "cidr": "10.0.0.0/0"},
    {},  # a CIDR rule without protocol and ports
])
def test_a_bad_rule_is_400_and_makes_nothing(proxy, rule):
    harness, neutron = proxy
    group = neutron.add_group("p1", "web")
    answer = harness.call("POST", RULES, {"security_group_rule": {
        "parent_group_id": group["id"], **rule}})
    assert answer.status_int == 400, answer.text
    assert neutron.items["security_groups"][group["id"]]["security_group_rules"] == []


def test_a_rule_of_an_unknown_group_is_404_of_a_bad_id_400(proxy):
    harness, _ = proxy
    body = {"parent_group_id": "1" * 32, "ip_protocol": "tcp", "from_port": 1, "to_port": 2}
    assert harness.call("POST", RULES, {"security_group_rule": body}).status_int == 404
    body["parent_group_id"] = "x"
    assert harness.call("POST", RULES, {"security_group_rule": body}).status_int == 400


def test_a_group_rule_without_ports_opens_the_protocol():
    assert ingress_rule("tcp", None, None, "g", None) == {
        "protocol": "tcp", "from_port": 1, "to_port": 65535}
    assert ingress_rule(None, None, None, "g", None) == {}
    assert ingress_rule("tcp", None, None, None, "0.0.0.0/0") is None

"""os-quota-class-sets: the default class is every project's limits unless it has its own."""

from __future__ import annotations

from tests.unit.api.harness import Harness


def test_changing_the_default_class_changes_every_projects_defaults_but_not_their_own():
    harness = Harness.new()
    shown = harness.admin("GET", "/v2.1/os-quota-class-sets/default").json["quota_class_set"]
    assert shown["id"] == "default" and shown["instances"] == 10
    assert "server_groups" not in shown and "floating_ips" in shown  # 2.1's names
    harness.admin("PUT", "/v2.1/os-quota-sets/p2", {"quota_set": {"instances": 3}})
    changed = harness.admin("PUT", "/v2.1/os-quota-class-sets/default", {
        "quota_class_set": {"instances": 110, "floating_ips": 7}}).json["quota_class_set"]
    assert (changed["instances"], changed["floating_ips"]) == (110, 7)
    assert "id" not in changed
    again = harness.admin("GET", "/v2.1/os-quota-class-sets/default").json["quota_class_set"]
    assert (again["instances"], again["floating_ips"]) == (110, 7)
    assert harness.backend.quotas.limits("p1")["instances"] == 110
    assert harness.backend.quotas.limits("p2")["instances"] == 3  # its own stays
    defaults = harness.call("GET", "/v2.1/os-quota-sets/p1/defaults").json["quota_set"]
    assert defaults["instances"] == 110
    at_257 = harness.admin("GET", "/v2.1/os-quota-class-sets/default",
                           version="2.57").json["quota_class_set"]
    assert "server_groups" in at_257 and "injected_files" not in at_257
    # Members cannot; other classes change nothing, so they are refused; bodies checked.
    assert harness.call("GET", "/v2.1/os-quota-class-sets/default").status_int == 403
    assert harness.admin("PUT", "/v2.1/os-quota-class-sets/gold", {
        "quota_class_set": {"instances": 1}}).status_int == 400
    for body in ({"quota_class_set": {"instances": -2}}, {"quota_class_set": {"x": 1}}, {}):
        assert harness.admin("PUT", "/v2.1/os-quota-class-sets/default",
                             body).status_int == 400, body
    for version, body in (("2.50", {"floating_ips": 1}), ("2.57", {"injected_files": 1})):
        assert harness.admin("PUT", "/v2.1/os-quota-class-sets/default", {
            "quota_class_set": body}, version=version).status_int == 400, version


def test_before_2_50_an_update_takes_the_server_group_quotas_it_does_not_show():
    """As Nova's update schema before 2.50 (all its quotas, `networks` too), which Horizon's
    Update Default Quotas sends at 2.1: taken and kept, shown from 2.50; `networks` (no
    such quota since nova-network) taken and not kept."""
    harness = Harness.new()
    answer = harness.admin("PUT", "/v2.1/os-quota-class-sets/default", {"quota_class_set": {
        "instances": 17, "server_groups": 12, "server_group_members": 13, "networks": 3,
        "injected_files": 4}})
    assert answer.status_int == 200, answer.body
    changed = answer.json["quota_class_set"]
    assert changed["instances"] == 17 and "server_groups" not in changed
    assert "networks" not in changed
    at_250 = harness.admin("GET", "/v2.1/os-quota-class-sets/default",
                           version="2.50").json["quota_class_set"]
    assert (at_250["server_groups"], at_250["server_group_members"]) == (12, 13)
    assert harness.backend.quotas.limits("p1")["server_groups"] == 12
    assert "networks" not in harness.backend.quotas.default_limits()

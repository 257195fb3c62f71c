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
    for body in ({"quota_class_set": {"instances": -2}}, {"quota_class_set": {"x": 1}},
                 {"quota_class_set": {"server_groups": 1}}, {}):
        assert harness.admin("PUT", "/v2.1/os-quota-class-sets/default",
                             body).status_int == 400, body

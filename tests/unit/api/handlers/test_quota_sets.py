"""os-quota-sets and limits: defaults, a project's own limits (admins set them), usage
from Placement, fields per microversion."""

from __future__ import annotations

from tests.unit.api.harness import Harness


def test_show_update_detail_and_delete():
    harness = Harness.new()
    harness.add_host()
    harness.add_flavor()
    harness.boot()
    shown = harness.call("GET", "/v2.1/os-quota-sets/p1").json["quota_set"]
    assert (shown["id"], shown["instances"], shown["cores"], shown["ram"]) == \
        ("p1", 10, 20, 51200)
    assert "floating_ips" in shown and "injected_files" in shown
    newer = harness.call("GET", "/v2.1/os-quota-sets/p1", version="2.57").json["quota_set"]
    assert "floating_ips" not in newer and "injected_files" not in newer
    assert harness.call("GET", "/v2.1/os-quota-sets/p2").status_int == 403
    assert harness.call("PUT", "/v2.1/os-quota-sets/p1",
                        {"quota_set": {"instances": 3}}).status_int == 403
    assert harness.admin("PUT", "/v2.1/os-quota-sets/p1",
                         {"quota_set": {"instances": 0}}).status_int == 400  # 1 in use
    updated = harness.admin("PUT", "/v2.1/os-quota-sets/p1",
                            {"quota_set": {"instances": "3", "cores": -1}}).json["quota_set"]
    assert (updated["instances"], updated["cores"]) == (3, -1) and "id" not in updated
    detail = harness.call("GET", "/v2.1/os-quota-sets/p1/detail").json["quota_set"]
    assert detail["instances"] == {"in_use": 1, "limit": 3, "reserved": 0}
    assert detail["ram"] == {"in_use": 256, "limit": 51200, "reserved": 0}
    defaults = harness.call("GET", "/v2.1/os-quota-sets/p1/defaults").json["quota_set"]
    assert defaults["instances"] == 10
    assert harness.admin("DELETE", "/v2.1/os-quota-sets/p1").status_int == 202
    assert harness.call("GET", "/v2.1/os-quota-sets/p1").json["quota_set"]["instances"] == 10
    assert harness.admin("PUT", "/v2.1/os-quota-sets/p1",
                         {"quota_set": {"wat": 1}}).status_int == 400


def test_a_users_limits_within_its_project():
    harness = Harness.new()
    harness.add_host()
    harness.add_flavor()
    harness.boot(user="u1")
    assert harness.admin("PUT", "/v2.1/os-quota-sets/p1?user_id=u2",
                         {"quota_set": {"instances": 11}}).status_int == 400  # > project's
    updated = harness.admin("PUT", "/v2.1/os-quota-sets/p1?user_id=u2",
                            {"quota_set": {"instances": 1, "ram": "2048"}}).json["quota_set"]
    assert (updated["instances"], updated["ram"], updated["cores"]) == (1, 2048, 20)
    shown = harness.admin("GET", "/v2.1/os-quota-sets/p1?user_id=u2").json["quota_set"]
    assert (shown["id"], shown["instances"], shown["ram"]) == ("p1", 1, 2048)
    assert harness.admin("GET", "/v2.1/os-quota-sets/p1").json["quota_set"]["instances"] == 10
    # u1 already has one: its limit cannot go below it (unless forced).
    assert harness.admin("PUT", "/v2.1/os-quota-sets/p1?user_id=u1",
                         {"quota_set": {"instances": 0}}).status_int == 400
    detail = harness.admin("GET", "/v2.1/os-quota-sets/p1/detail?user_id=u2").json[
        "quota_set"]
    assert detail["instances"] == {"in_use": 0, "limit": 1, "reserved": 0}
    # Enforced at a create: u2 may have one server, u1 (the project's limits) more.
    harness.boot(user="u2")
    refused = harness.call("POST", "/v2.1/servers", {"server": {
        "name": "two", "flavorRef": "1", "imageRef": "file:///dev/null"}}, user="u2")
    assert refused.status_int == 403 and "instances" in refused.text
    harness.boot(user="u1", name="again")
    assert harness.admin("DELETE", "/v2.1/os-quota-sets/p1?user_id=u2").status_int == 202
    assert harness.admin("GET", "/v2.1/os-quota-sets/p1?user_id=u2").json[
        "quota_set"]["instances"] == 10


def test_limits_show_the_callers_project_and_hide_what_a_version_dropped():
    harness = Harness.new()
    harness.add_host()
    harness.add_flavor()
    harness.boot()
    absolute = harness.call("GET", "/v2.1/limits").json["limits"]["absolute"]
    assert (absolute["maxTotalInstances"], absolute["totalInstancesUsed"],
            absolute["totalCoresUsed"], absolute["totalRAMUsed"]) == (10, 1, 1, 256)
    assert "maxImageMeta" in absolute and "maxTotalFloatingIps" in absolute
    newer = harness.call("GET", "/v2.1/limits", version="2.57").json["limits"]["absolute"]
    assert not {"maxImageMeta", "maxTotalFloatingIps", "maxPersonality",
                "totalSecurityGroupsUsed"} & set(newer)
    # Naming a project at all is the admins' (Nova asks limits:other_project whenever
    # tenant_id is given, the caller's own project too).
    for project in ("p2", "p1"):
        refused = harness.call("GET", f"/v2.1/limits?tenant_id={project}")
        assert (refused.status_int, refused.json["forbidden"]["message"]) == (
            403, "Policy doesn't allow os_compute_api:limits:other_project to be performed.")
    other = harness.admin("GET", "/v2.1/limits?tenant_id=p1").json["limits"]["absolute"]
    assert other["totalInstancesUsed"] == 1

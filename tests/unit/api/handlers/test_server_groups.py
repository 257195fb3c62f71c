"""os-server-groups: per project, Nova's shapes per microversion, the group hint places by
the group's policy, quotas on groups and members."""

from __future__ import annotations

import pytest

from etcd_compute.instances import records
from tests.unit.api.harness import ADMIN, Harness


@pytest.fixture
def harness() -> Harness:
    harness = Harness.new()
    harness.add_host("hv1")
    harness.add_host("hv2")
    harness.add_flavor()
    return harness


def make(harness: Harness, policy: str = "anti-affinity", version: str = "2.64",
         **more) -> dict:
    body = {"name": "web", **({"policy": policy} if version >= "2.64" else
                              {"policies": [policy]}), **more}
    answer = harness.call("POST", "/v2.1/os-server-groups", {"server_group": body},
                          version=version)
    assert answer.status_int == 200, answer.text
    return dict(answer.json["server_group"])


def boot_in(harness: Harness, group: str, **kwargs):
    return harness.call("POST", "/v2.1/servers", {
        "server": {"name": "member", "flavorRef": "1", "imageRef": "file:///dev/null"},
        "os:scheduler_hints": {"group": group}}, **kwargs)


def test_a_group_is_shown_as_nova_shows_it_at_each_version(harness: Harness):
    old = make(harness, "affinity", version="2.1")
    assert old == {"id": old["id"], "name": "web", "policies": ["affinity"], "metadata": {},
                   "members": []}
    new = make(harness, "anti-affinity", rules={"max_server_per_host": 2})
    assert (new["policy"], new["rules"], new["project_id"], new["user_id"]) == (
        "anti-affinity", {"max_server_per_host": 2}, "p1", "u1")
    listed = harness.call("GET", "/v2.1/os-server-groups", version="2.13").json
    assert [g["id"] for g in listed["server_groups"]] == [old["id"], new["id"]]
    assert harness.call("GET", "/v2.1/os-server-groups", project="p2").json == {
        "server_groups": []}
    assert harness.call("GET", "/v2.1/os-server-groups?limit=1&offset=1").json[
        "server_groups"][0]["id"] == new["id"]


@pytest.mark.parametrize(("version", "body", "fragment"), [
    ("2.14", {"name": "g", "policies": ["soft-affinity"]}, "Invalid input"),
    ("2.64", {"name": "g", "policies": ["affinity"]}, "Invalid input"),
    ("2.64", {"name": "g", "policy": "affinity", "rules": {"max_server_per_host": 2}},
     "Only anti-affinity policy supports rules."),
    ("2.64", {"name": "g", "policy": "anti-affinity", "rules": {"other": 1}},
     "Invalid input"),
    ("2.1", {"name": "g", "policies": ["affinity", "anti-affinity"]}, "Invalid input"),
])
def test_malformed_groups_are_refused(harness: Harness, version, body, fragment):
    answer = harness.call("POST", "/v2.1/os-server-groups", {"server_group": body},
                          version=version)
    assert answer.status_int == 400 and fragment in answer.json["badRequest"]["message"]
    assert harness.backend.server_groups.list() == []


def test_anti_affinity_members_go_to_different_hosts_and_the_group_is_full_at_two(
        harness: Harness):
    group = make(harness)
    first, second = (boot_in(harness, group["id"]).json["server"]["id"] for _ in range(2))
    hosts = {records.locate(harness.store, u)["host"] for u in (first, second)}
    assert len(hosts) == 2
    third = boot_in(harness, group["id"]).json["server"]["id"]  # no third host: ERROR
    assert harness.show(third)["status"] == "ERROR"
    shown = harness.call("GET", f"/v2.1/os-server-groups/{group['id']}").json["server_group"]
    assert sorted(shown["members"]) == sorted([first, second])
    assert harness.show(first, version="2.71")["server_groups"] == [group["id"]]


def test_members_beyond_the_quota_are_refused_before_any_claim(harness: Harness):
    harness.admin("PUT", "/v2.1/os-quota-sets/p1", {"quota_set": {"server_group_members": 1}})
    group = make(harness, "soft-anti-affinity")
    assert boot_in(harness, group["id"]).status_int == 202
    claims = dict(harness.placement.consumers)
    answer = boot_in(harness, group["id"])
    assert answer.status_int == 403
    assert answer.json["forbidden"]["message"] == "Quota exceeded, too many servers in group"
    assert harness.placement.consumers == claims


def test_groups_beyond_the_quota_are_403(harness: Harness):
    harness.admin("PUT", "/v2.1/os-quota-sets/p1", {"quota_set": {"server_groups": 1}})
    make(harness)
    answer = harness.call("POST", "/v2.1/os-server-groups", {
        "server_group": {"name": "two", "policies": ["affinity"]}})
    assert answer.status_int == 403
    assert answer.json["forbidden"]["message"] == "Quota exceeded, too many server groups."
    detail = harness.call("GET", "/v2.1/os-quota-sets/p1/detail").json["quota_set"]
    assert detail["server_groups"]["in_use"] == 1


def test_another_projects_group_is_no_hint_and_not_shown(harness: Harness):
    group = make(harness)
    answer = boot_in(harness, group["id"], project="p2")
    assert answer.status_int == 400
    assert answer.json["badRequest"]["message"] == \
        f"Instance group {group['id']} could not be found."
    assert harness.call("GET", "/v2.1/os-server-groups?all_projects=1", roles=ADMIN,
                        project="admin", user="root").json["server_groups"][0]["id"] == \
        group["id"]


def test_another_projects_group_is_not_found_as_one_that_does_not_exist(harness: Harness):
    """Nova looks a group up in the caller's project only (admins: all), so another
    project's is 404 as a missing one is: its existence is not told, nothing changes."""
    group = make(harness)
    missing = "0b5d6c43-43f6-4c1e-9f8b-6c5a8a6f2a11"
    for method in ("GET", "DELETE"):
        for gid, project in ((group["id"], "p2"), (missing, "p1")):
            answer = harness.call(method, f"/v2.1/os-server-groups/{gid}", project=project,
                                  user="u2")
            assert (answer.status_int, answer.json) == (404, {"itemNotFound": {
                "code": 404, "message": f"Instance group {gid} could not be found."}})
    assert [g.id for g in harness.backend.server_groups.list()] == [group["id"]]
    shown = harness.admin("GET", f"/v2.1/os-server-groups/{group['id']}")
    assert shown.json["server_group"]["id"] == group["id"]
    assert harness.admin("DELETE", f"/v2.1/os-server-groups/{group['id']}").status_int == 204
    assert harness.backend.server_groups.list() == []


@pytest.mark.parametrize("hints", [
    {"same_host": "0b5d6c43-43f6-4c1e-9f8b-6c5a8a6f2a11"},
    {"different_host": ["0b5d6c43-43f6-4c1e-9f8b-6c5a8a6f2a11"]},
    {"query": '[">=", "$free_ram_mb", 1024]', "target_cell": "cell1", "cidr": "/24",
     "build_near_host_ip": "10.0.0.1", "a_hint_of_another_filter": [1, 2]},
])
def test_hints_of_filters_that_are_off_are_taken_and_ignored_as_novas(harness: Harness,
                                                                       hints: dict):
    """Nova's default filters read only `group`: a hint of another filter (SameHostFilter,
    DifferentHostFilter, JsonFilter, ...) passes the schema and places nothing."""
    answer = harness.call("POST", "/v2.1/servers", {
        "server": {"name": "x", "flavorRef": "1", "imageRef": "file:///dev/null"},
        "os:scheduler_hints": hints})
    assert answer.status_int == 202, answer.text


@pytest.mark.parametrize("hints", [
    {"same_host": ["not-a-server-id"]}, {"different_host": 7}, {"group": "nope"},
    {"build_near_host_ip": "not an address"}, {"cidr": "24"}])
def test_hints_nova_s_schema_refuses_are_400(harness: Harness, hints: dict):
    answer = harness.call("POST", "/v2.1/servers", {
        "server": {"name": "x", "flavorRef": "1", "imageRef": "file:///dev/null"},
        "os:scheduler_hints": hints})
    assert answer.status_int == 400, answer.text


def test_deleting_a_group_leaves_its_members(harness: Harness):
    group = make(harness)
    member = boot_in(harness, group["id"]).json["server"]["id"]
    assert harness.call("DELETE", f"/v2.1/os-server-groups/{group['id']}").status_int == 204
    assert harness.call("GET", f"/v2.1/os-server-groups/{group['id']}").status_int == 404
    assert harness.show(member)["status"] == "BUILD"

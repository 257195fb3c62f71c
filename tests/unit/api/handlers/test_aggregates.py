"""os-aggregates: Nova's calls and refusals; hosts mirrored to Placement; zones."""

from __future__ import annotations

from tests.unit.api.harness import Harness


def _create(harness: Harness, name: str = "rack1", **more: object) -> dict:
    response = harness.admin("POST", "/v2.1/os-aggregates",
                             {"aggregate": {"name": name, **more}})
    assert response.status_int == 200, response.text
    return dict(response.json["aggregate"])


def test_create_show_update_delete():
    harness = Harness.new()
    made = _create(harness)
    assert made["id"] == 1 and made["availability_zone"] is None
    assert "hosts" not in made and "metadata" not in made and made["deleted"] is False
    assert _create(harness, "rack2", availability_zone="az2")["id"] == 2
    shown = harness.admin("GET", "/v2.1/os-aggregates/2", version="2.41").json["aggregate"]
    assert shown["metadata"] == {"availability_zone": "az2"} and shown["hosts"] == []
    assert "uuid" in shown
    assert harness.admin("POST", "/v2.1/os-aggregates",
                         {"aggregate": {"name": "rack1"}}).status_int == 409
    updated = harness.admin("PUT", "/v2.1/os-aggregates/1",
                            {"aggregate": {"name": "rack9", "availability_zone": "az9"}})
    assert updated.json["aggregate"]["name"] == "rack9"
    assert updated.json["aggregate"]["updated_at"] is not None
    assert harness.admin("PUT", "/v2.1/os-aggregates/1",
                         {"aggregate": {"name": "rack2"}}).status_int == 409
    # The old name is free again.
    assert _create(harness, "rack1")["id"] == 3
    assert [a["name"] for a in harness.admin("GET", "/v2.1/os-aggregates").json[
        "aggregates"]] == ["rack9", "rack2", "rack1"]
    assert harness.admin("DELETE", "/v2.1/os-aggregates/3").status_int == 200
    # Ids are never given again.
    assert _create(harness, "rack3")["id"] == 4
    assert harness.admin("GET", "/v2.1/os-aggregates/3").status_int == 404
    assert harness.admin("GET", "/v2.1/os-aggregates/-1").status_int == 404
    assert harness.admin("GET", "/v2.1/os-aggregates/x").status_int == 400


def test_bodies_and_rules():
    harness = Harness.new()
    for body in ({"aggregate": {"name": ""}}, {"aggregate": {"name": "a" * 256}},
                 {"aggregate": {"name": "a", "availability_zone": "a:b"}},
                 {"aggregate": {"name": "a", "extra": 1}}, {"name": "a"}):
        assert harness.admin("POST", "/v2.1/os-aggregates", body).status_int == 400, body
    assert harness.call("POST", "/v2.1/os-aggregates",
                        {"aggregate": {"name": "a"}}).status_int == 403
    _create(harness, "a")
    for method, path in (("GET", "/v2.1/os-aggregates"), ("GET", "/v2.1/os-aggregates/1"),
                         ("DELETE", "/v2.1/os-aggregates/1")):
        assert harness.call(method, path).status_int == 403
    assert harness.admin("POST", "/v2.1/os-aggregates/1/action",
                         {"lock": {}}).json["badRequest"]["message"] == \
        "There is no such action: lock"


def test_hosts_join_the_aggregate_in_placement_too():
    harness = Harness.new()
    rp = harness.add_host("hv1")
    made = _create(harness, "fast", availability_zone="az1")
    path = f"/v2.1/os-aggregates/{made['id']}/action"
    uuid = harness.admin("GET", f"/v2.1/os-aggregates/{made['id']}",
                         version="2.41").json["aggregate"]["uuid"]
    added = harness.admin("POST", path, {"add_host": {"host": "hv1"}})
    assert added.json["aggregate"]["hosts"] == ["hv1"]
    assert uuid in harness.placement.get_aggregates(rp)
    assert harness.admin("POST", path, {"add_host": {"host": "hv1"}}).status_int == 409
    missing = harness.admin("POST", path, {"add_host": {"host": "nohost"}})
    assert missing.status_int == 404
    assert missing.json["itemNotFound"]["message"] == "Compute host nohost could not be found."
    # The host is in az1 now: a zone of its own for servers and os-availability-zone.
    zones = harness.call("GET", "/v2.1/os-availability-zone").json["availabilityZoneInfo"]
    assert [z["zoneName"] for z in zones] == ["az1"]
    # A host is in one zone only.
    other = _create(harness, "other", availability_zone="az2")
    refused = harness.admin("POST", f"/v2.1/os-aggregates/{other['id']}/action",
                            {"add_host": {"host": "hv1"}})
    assert refused.status_int == 400 and "['az1']" in refused.text
    assert harness.admin("DELETE", f"/v2.1/os-aggregates/{made['id']}").status_int == 400
    assert harness.call("POST", path, {"remove_host": {"host": "hv1"}}).status_int == 403
    removed = harness.admin("POST", path, {"remove_host": {"host": "hv1"}})
    assert removed.json["aggregate"]["hosts"] == []
    assert uuid not in harness.placement.get_aggregates(rp)
    assert harness.admin("POST", path, {"remove_host": {"host": "hv1"}}).status_int == 404
    assert harness.admin("DELETE", f"/v2.1/os-aggregates/{made['id']}").status_int == 200


def test_set_metadata_sets_and_removes_keys_and_the_zone():
    harness = Harness.new()
    made = _create(harness)
    path = f"/v2.1/os-aggregates/{made['id']}/action"
    shown = harness.admin("POST", path, {"set_metadata": {"metadata": {
        "ssd": "true", "availability_zone": "az3"}}}).json["aggregate"]
    assert shown["metadata"] == {"ssd": "true", "availability_zone": "az3"}
    assert shown["availability_zone"] == "az3"
    shown = harness.admin("POST", path, {"set_metadata": {"metadata": {
        "ssd": None, "availability_zone": None}}}).json["aggregate"]
    assert shown["metadata"] == {} and shown["availability_zone"] is None
    assert harness.admin("POST", path, {"set_metadata": {"metadata": {
        "bad key!": "x"}}}).status_int == 400


def test_a_server_created_in_an_aggregates_zone_lands_on_its_hosts():
    harness = Harness.new()
    harness.add_flavor()
    harness.add_host("hv1")
    harness.add_host("hv2")
    made = _create(harness, "fast", availability_zone="az1")
    harness.admin("POST", f"/v2.1/os-aggregates/{made['id']}/action",
                  {"add_host": {"host": "hv2"}})
    for _ in range(3):
        uuid = harness.boot(availability_zone="az1")
        assert harness.show(uuid, roles=("admin",), project="p1")[
            "OS-EXT-SRV-ATTR:host"] == "hv2"

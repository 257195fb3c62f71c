"""os-migrations: a resize is a migration (finished, then confirmed), with Nova's fields
and filters per microversion; admins only."""

from __future__ import annotations

from tests.unit.api.harness import Harness


def _resized(harness: Harness) -> str:
    harness.add_host()
    harness.add_flavor()
    harness.add_flavor("2", "m1.small", vcpus=2, ram=512, disk=2)
    uuid = harness.boot()
    harness.activate(uuid)
    assert harness.action(uuid, {"resize": {"flavorRef": "2"}}).status_int == 202
    return uuid


def test_a_resize_is_listed_as_nova_lists_it():
    harness = Harness.new()
    uuid = _resized(harness)
    (running,) = harness.admin("GET", "/v2.1/os-migrations").json["migrations"]
    assert (running["instance_uuid"], running["status"]) == (uuid, "pre-migrating")
    assert "migration_type" not in running and "uuid" not in running
    harness.host_does(uuid)
    (done,) = harness.admin("GET", "/v2.1/os-migrations", version="2.23").json["migrations"]
    assert (done["status"], done["migration_type"]) == ("finished", "resize")
    assert done["source_compute"] == done["dest_compute"] == "hv1"
    assert harness.action(uuid, {"confirmResize": None}).status_int == 204
    (done,) = harness.admin("GET", "/v2.1/os-migrations", version="2.80").json["migrations"]
    assert done["status"] == "confirmed"
    assert (done["user_id"], done["project_id"]) == ("u1", "p1") and done["uuid"]
    assert done["id"] == running["id"]


def test_filters_paging_and_rules():
    harness = Harness.new()
    uuid = _resized(harness)
    for query, count in (("status=pre-migrating", 1), ("status=finished", 0),
                         (f"instance_uuid={uuid}", 1), ("host=hv1", 1), ("host=hv9", 0),
                         ("migration_type=resize", 1), ("migration_type=live-migration", 0),
                         ("user_id=u9", 0), ("project_id=p1", 1)):
        listed = harness.admin("GET", f"/v2.1/os-migrations?{query}", version="2.80")
        assert len(listed.json["migrations"]) == count, query
    page = harness.admin("GET", "/v2.1/os-migrations?limit=1", version="2.59").json
    assert page["migrations_links"][0]["rel"] == "next"
    assert harness.admin("GET", "/v2.1/os-migrations?marker=nope",
                         version="2.59").status_int == 400
    assert harness.admin("GET", "/v2.1/os-migrations?wat=1", version="2.59").status_int == 400
    assert harness.admin("GET", "/v2.1/os-migrations?wat=1").status_int == 200
    assert harness.call("GET", "/v2.1/os-migrations").status_int == 403

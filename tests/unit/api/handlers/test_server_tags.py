"""Server tags (2.26): listed, added one by one or all at once, removed; 404 before
2.26, 409 while the server is not ACTIVE or SHUTOFF; another project's is refused by the
rule, as Nova's."""

from __future__ import annotations

from tests.unit.api.harness import Harness


def test_tags_from_2_26():
    harness = Harness.new()
    harness.add_host()
    harness.add_flavor()
    uuid = harness.boot("t", version="2.52", networks="auto", tags=["a"])
    url = f"/v2.1/servers/{uuid}/tags"
    assert harness.call("GET", url, version="2.25").status_int == 404
    assert harness.call("GET", url, version="2.26").json == {"tags": ["a"]}
    assert harness.call("PUT", url + "/b", version="2.26").status_int == 409  # building
    harness.activate(uuid)
    added = harness.call("PUT", url + "/b", version="2.26")
    assert added.status_int == 201 and added.headers["Location"].endswith(url + "/b")
    assert harness.call("PUT", url + "/b", version="2.26").status_int == 204
    assert harness.call("GET", url + "/b", version="2.26").status_int == 204
    assert harness.call("PUT", url + "/a,b", version="2.26").status_int == 400
    assert harness.call("GET", "/v2.1/servers?tags=a,b", version="2.26").json["servers"]
    assert harness.call("GET", "/v2.1/servers?not-tags-any=b",
                        version="2.26").json["servers"] == []
    assert harness.call("PUT", url, {"tags": ["x", "x"]}, version="2.26").json == \
        {"tags": ["x"]}
    assert harness.call("DELETE", url + "/b", version="2.26").status_int == 404
    assert harness.call("DELETE", url, version="2.26").status_int == 204
    shown = harness.call("GET", f"/v2.1/servers/{uuid}", version="2.26").json["server"]
    assert shown["tags"] == []
    # Nova finds the server in any project, then its rule refuses another project's member.
    refused = harness.call("GET", url, version="2.26", project="p2")
    assert (refused.status_int, refused.json["forbidden"]["message"]) == (
        403, "Policy doesn't allow os_compute_api:os-server-tags:index to be performed.")
    missing = "0b5d6c43-43f6-4c1e-9f8b-6c5a8a6f2a11"
    unknown = harness.call("GET", f"/v2.1/servers/{missing}/tags", version="2.26")
    assert (unknown.status_int, unknown.json["itemNotFound"]["message"]) == (
        404, f"Instance {missing} has no mapping to a cell.")
    assert harness.call("PUT", url, {"tags": ["y"] * 51}, version="2.26").status_int == 400

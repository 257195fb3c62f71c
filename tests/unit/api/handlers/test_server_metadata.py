"""Server metadata: Nova's calls and answers, the quota, the states that take a change."""

from __future__ import annotations

import pytest

from tests.unit.api.harness import Harness


def test_metadata_is_listed_merged_replaced_shown_and_deleted(harness: Harness):
    uuid = harness.boot(metadata={"a": "1"})
    harness.activate(uuid)
    base = f"/v2.1/servers/{uuid}/metadata"
    assert harness.call("GET", base).json == {"metadata": {"a": "1"}}
    assert harness.call("POST", base, {"metadata": {"b": "2"}}).json == {
        "metadata": {"a": "1", "b": "2"}}
    assert harness.call("PUT", base + "/c", {"meta": {"c": "3"}}).json == {"meta": {"c": "3"}}
    assert harness.call("GET", base + "/c").json == {"meta": {"c": "3"}}
    assert harness.call("PUT", base, {"metadata": {"z": "9"}}).json == {"metadata": {"z": "9"}}
    assert harness.call("DELETE", base + "/z").status_int == 204
    assert harness.call("GET", base).json == {"metadata": {}}
    assert harness.show(uuid)["metadata"] == {}


@pytest.mark.parametrize(("method", "path", "body", "status", "fragment"), [
    ("PUT", "/x", {"meta": {"y": "1"}}, 400, "Request body and URI mismatch"),
    ("PUT", "/x", {"meta": {"x": "1", "y": "2"}}, 400, "Invalid input"),
    ("GET", "/nope", None, 404, "Metadata item was not found"),
    ("DELETE", "/nope", None, 404, "Metadata item was not found"),
    ("POST", "", {"metadata": {f"k{i}": "v" for i in range(129)}}, 403,
     "Maximum number of metadata items exceeds 128"),
])
def test_refusals(harness: Harness, method, path, body, status, fragment):
    uuid = harness.boot()
    harness.activate(uuid)
    before = harness.store.revision
    answer = harness.call(method, f"/v2.1/servers/{uuid}/metadata{path}", body)
    assert answer.status_int == status and fragment in list(answer.json.values())[0]["message"]
    assert harness.store.revision == before


def test_no_change_while_it_builds_and_none_by_a_reader_or_another_project(harness: Harness):
    uuid = harness.boot()
    answer = harness.call("POST", f"/v2.1/servers/{uuid}/metadata", {"metadata": {"a": "b"}})
    assert answer.status_int == 409
    assert answer.json["conflictingRequest"]["message"] == \
        f"Cannot 'update metadata' instance {uuid} while it is in vm_state building"
    harness.activate(uuid)
    assert harness.call("POST", f"/v2.1/servers/{uuid}/metadata", {"metadata": {"a": "b"}},
                        roles=("reader",)).status_int == 403
    assert harness.call("GET", f"/v2.1/servers/{uuid}/metadata",
                        project="p2").status_int == 404


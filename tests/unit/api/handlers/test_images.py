"""/images (up to 2.35): Glance's images as the project sees them, in Nova's shape; only
the owner changes or deletes one; metadata is the image's properties."""

from __future__ import annotations

from typing import Any

import pytest

from etcd_compute.errors import GlanceError, NotFound
from etcd_compute.glance import visible_to
from tests.unit.api.harness import Harness

MINE, PUBLIC, THEIRS = ("11111111-1111-4111-8111-111111111111",
                        "22222222-2222-4222-8222-222222222222",
                        "33333333-3333-4333-8333-333333333333")
SERVER = "44444444-4444-4444-8444-444444444444"


class Glance:
    """Glance's images as its service user sees them (all), its patch and delete."""

    endpoint = "https://glance.example:9292"

    def __init__(self) -> None:
        self.images: dict[str, dict[str, Any]] = {
            MINE: {"id": MINE, "name": "snap", "status": "active", "owner": "p1",
                   "visibility": "private", "min_ram": 0, "min_disk": 1, "size": 10,
                   "created_at": "2026-01-02T00:00:00Z", "updated_at": "2026-01-02T00:00:00Z",
                   "image_type": "snapshot", "instance_uuid": SERVER, "os_distro": "x"},
            PUBLIC: {"id": PUBLIC, "name": "base", "status": "queued", "owner": "p9",
                     "visibility": "public", "min_ram": 512, "min_disk": 0, "size": None,
                     "created_at": "2026-01-01T00:00:00Z",
                     "updated_at": "2026-01-01T00:00:00Z"},
            THEIRS: {"id": THEIRS, "name": "secret", "status": "active", "owner": "p2",
                     "visibility": "private", "created_at": "2026-01-03T00:00:00Z",
                     "updated_at": "2026-01-03T00:00:00Z"}}

    def get(self, image_id: str) -> dict[str, Any]:
        if image_id not in self.images:
            raise NotFound(image_id)
        return dict(self.images[image_id])

    def list(self) -> list[dict[str, Any]]:
        return [dict(image) for image in self.images.values()]

    def can_see(self, image: dict[str, Any], project_id: str) -> bool:
        return visible_to(image, project_id, False)

    def update(self, image_id: str, **changes: Any) -> None:
        self.images[image_id].update(changes)

    def remove_properties(self, image_id: str, names: list[str]) -> None:
        for name in names:
            del self.images[image_id][name]

    def delete(self, image_id: str) -> None:
        del self.images[image_id]


@pytest.fixture
def harness() -> Harness:
    harness = Harness.new()
    harness.glance = harness.backend.images.glance = Glance()
    return harness


def test_a_project_lists_what_it_sees_newest_first_with_novas_filters(harness: Harness):
    listed = harness.call("GET", "/v2.1/images").json["images"]
    assert [i["id"] for i in listed] == [MINE, PUBLIC]  # another's private image is not
    assert set(listed[0]) == {"id", "name", "links"}
    detail = harness.call("GET", "/v2.1/images/detail").json["images"]
    mine = detail[0]
    assert (mine["status"], mine["progress"], mine["minDisk"], mine["metadata"]) == (
        "ACTIVE", 100, 1, {"image_type": "snapshot", "instance_uuid": SERVER,
                           "os_distro": "x"})
    assert mine["server"]["id"] == SERVER and mine["created"] == "2026-01-02T00:00:00Z"
    assert (detail[1]["status"], detail[1]["progress"]) == ("SAVING", 25)
    for query, expected in (("status=ACTIVE", [MINE]), ("name=base", [PUBLIC]),
                            (f"server={SERVER}", [MINE]),
                            (f"server=https://x/v2.1/servers/{SERVER}", [MINE]),
                            ("type=snapshot", [MINE]), ("minRam=256", [PUBLIC]),
                            ("changes-since=2026-01-01T12:00:00Z", [MINE]),
                            ("limit=1", [MINE]), (f"marker={MINE}", [PUBLIC])):
        found = harness.call("GET", f"/v2.1/images?{query}").json["images"]
        assert [i["id"] for i in found] == expected, query
    assert harness.call("GET", "/v2.1/images?changes-since=yesterday").status_int == 400
    assert harness.call("GET", "/v2.1/images", version="2.36").status_int == 404


def test_show_and_delete_as_glance_allows_the_caller(harness: Harness):
    assert harness.call("GET", f"/v2.1/images/{PUBLIC}").json["image"]["name"] == "base"
    assert harness.call("GET", f"/v2.1/images/{THEIRS}").status_int == 404
    assert harness.call("GET", "/v2.1/images/not-an-id").status_int == 404
    assert harness.call("DELETE", f"/v2.1/images/{PUBLIC}").status_int == 403
    assert harness.call("DELETE", f"/v2.1/images/{MINE}").status_int == 204
    assert MINE not in harness.glance.images
    assert harness.admin("DELETE", f"/v2.1/images/{THEIRS}").status_int == 204


def test_metadata_is_the_images_properties(harness: Harness):
    base = f"/v2.1/images/{MINE}/metadata"
    assert harness.call("GET", base).json["metadata"]["os_distro"] == "x"
    merged = harness.call("POST", base, {"metadata": {"a": "1"}}).json["metadata"]
    assert merged["a"] == "1" and merged["os_distro"] == "x"
    replaced = harness.call("PUT", base, {"metadata": {"b": "2"}}).json["metadata"]
    assert replaced == {"b": "2"}
    assert harness.call("PUT", f"{base}/b", {"meta": {"b": "3"}}).json == {"meta": {"b": "3"}}
    assert harness.call("GET", f"{base}/b").json == {"meta": {"b": "3"}}
    assert harness.call("PUT", f"{base}/b", {"meta": {"c": "3"}}).status_int == 400
    assert harness.call("DELETE", f"{base}/b").status_int == 204
    assert harness.call("GET", f"{base}/b").status_int == 404
    # Glance's own fields are not metadata; another's image is not the caller's to change.
    assert harness.call("POST", base, {"metadata": {"owner": "p1"}}).status_int == 400
    assert harness.call("POST", f"/v2.1/images/{PUBLIC}/metadata",
                        {"metadata": {"a": "1"}}).status_int == 403
    harness.backend.quotas.update("p1", {"metadata_items": 1})
    assert harness.call("POST", base, {"metadata": {"x": "1", "y": "2"}}).status_int == 403


def test_an_admin_lists_the_images_it_can_show(harness: Harness):
    listed = [i["id"] for i in harness.admin("GET", "/v2.1/images").json["images"]]
    assert listed == [THEIRS, MINE, PUBLIC]
    assert harness.admin("GET", f"/v2.1/images/{THEIRS}").status_int == 200


def test_the_metadata_quota_is_refused_as_nova_refuses_it(harness: Harness):
    harness.backend.quotas.update("p1", {"metadata_items": 1})
    refused = harness.call("POST", f"/v2.1/images/{MINE}/metadata",
                           {"metadata": {"x": "1", "y": "2"}})
    assert refused.status_int == 403
    assert refused.json["forbidden"]["message"] == "Image metadata limit exceeded"


def test_a_malformed_glance_timestamp_is_shown_as_none_not_a_500(harness: Harness):
    harness.glance.images[MINE]["created_at"] = "yesterday"
    shown = harness.call("GET", f"/v2.1/images/{MINE}")
    assert shown.status_int == 200 and shown.json["image"]["created"] is None


# Who may change an image through the proxy is Glance's (modify_image, delete_image: an
# admin, or a member of the owner's project), as Nova answers Glance's refusal: a reader
# of the owner's project and another project's member are refused; another's private image
# is not found. Each request, and Nova's 403 message for it.
WRITES = {
    "delete": ("DELETE", "", None, "You are not allowed to delete the image."),
    "merge metadata": ("POST", "/metadata", {"metadata": {"a": "1"}},
                       "Not authorized for image {image}."),
    "replace metadata": ("PUT", "/metadata", {"metadata": {"a": "1"}},
                         "Not authorized for image {image}."),
    "set a key": ("PUT", "/metadata/a", {"meta": {"a": "1"}},
                  "Not authorized for image {image}."),
    "delete a key": ("DELETE", "/metadata/os_distro", None,
                     "Not authorized for image {image}."),
}
READER = {"roles": ("reader",)}
OTHER = {"roles": ("member", "reader"), "project": "p2", "user": "u2"}


@pytest.mark.parametrize("write", sorted(WRITES))
@pytest.mark.parametrize(("image", "who", "answer"), [
    pytest.param(MINE, READER, 403, id="the owner's reader"),
    pytest.param(PUBLIC, {}, 403, id="a member of another project than the owner's"),
    pytest.param(MINE, OTHER, 404, id="another project's private image"),
    pytest.param(MINE, {}, None, id="the owner's member"),
])
def test_who_changes_an_image_is_glances_rule_answered_as_nova(harness: Harness, write,
                                                               image, who, answer):
    method, path, body, message = WRITES[write]
    harness.glance.images[PUBLIC]["os_distro"] = "y"
    before = {key: dict(value) for key, value in harness.glance.images.items()}
    done = harness.call(method, f"/v2.1/images/{image}{path}", body, **who)
    if answer is None:
        assert done.status_int in (200, 204), done.text
        return
    expected = {403: {"forbidden": {"code": 403, "message": message.format(image=image)}},
                404: {"itemNotFound": {"code": 404, "message": "Image not found."}}}[answer]
    assert (done.status_int, done.json) == (answer, expected)
    assert harness.glance.images == before
    # Reading stays the reader's (Glance's get_image), not another project's private one.
    shown = harness.call("GET", f"/v2.1/images/{image}/metadata", **who)
    assert shown.status_int == (404 if answer == 404 else 200)


@pytest.mark.parametrize(("status", "answer"), [(409, 409), (400, 400), (413, 400)])
def test_a_delete_glance_refuses_is_answered_as_novas_not_a_500(harness: Harness, status: int,
                                                                 answer: int):
    """Glance's 409 is Nova's ImageDeleteConflict (409), its other refusals Nova's Invalid
    (400): seen after Glance half-deleted an image ("Image status transition from deleted
    to deleted is not allowed"), where we answered 500."""
    def refuse(image_id: str) -> None:
        raise GlanceError(f"Glance DELETE /v2/images/{image_id}: {status} refused", status)
    harness.glance.delete = refuse  # type: ignore[method-assign]
    answered = harness.call("DELETE", f"/v2.1/images/{MINE}")
    assert answered.status_int == answer, answered.text
    assert f"{status} refused" in answered.text
    assert MINE in harness.glance.images

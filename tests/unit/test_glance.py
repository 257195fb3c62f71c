"""The Glance client over canned answers: which project sees which image (Glance's rule),
finding by name or id, pages, and how answers become one-line errors."""

from __future__ import annotations

import json
from typing import Any

import pytest
import requests

from etcd_compute import glance as glance_module
from etcd_compute.errors import ConfigError, GlanceError, GlanceUnavailable, NotFound
from etcd_compute.glance import GlanceClient, visible_to

ENDPOINT = "https://glance.invalid:9292"
MINE, OTHER = "project-mine", "project-other"
IMAGE_ID = "6f1c1a52-3d4e-4c3b-9a55-2b0c6d8e9f10"
KEYSTONE = {"auth_url": "https://keystone.invalid/v3", "username": "etcd-compute",
            "password": "x", "project_name": "service"}


def image(visibility: str = "public", owner: str | None = OTHER, name: str = "cirros",
          image_id: str = IMAGE_ID) -> dict[str, Any]:
    return {"id": image_id, "name": name, "visibility": visibility, "owner": owner,
            "status": "active"}


def response(status: int, body: Any = None, text: str = "") -> requests.Response:
    answer = requests.Response()
    answer.status_code = status
    answer._content = json.dumps(body).encode() if body is not None else text.encode()
    answer.encoding = "utf-8"
    return answer


class Session:
    """Stands in for the keystoneauth1 session: records (method, path, params), answers from
    a script of path -> response."""

    def __init__(self, answers: dict[str, requests.Response | Exception]):
        self.answers = answers
        self.sent: list[tuple[str, str, Any]] = []

    def request(self, url: str, method: str, **kwargs: Any) -> requests.Response:
        path = url.removeprefix(ENDPOINT)
        self.sent.append((method, path, kwargs.get("params")))
        answer = self.answers.get(f"{method} {path}")
        if answer is None:
            return response(404, text="404 Not Found")
        if isinstance(answer, Exception):
            raise answer
        return answer

    def get_endpoint(self, **_: Any) -> str | None:
        return None


def client(answers: dict[str, Any]) -> GlanceClient:
    glance = GlanceClient({"endpoint": ENDPOINT, "keystone": KEYSTONE, "timeout": 5.0})
    glance.session = Session(answers)
    return glance


# -- who sees what ----------------------------------------------------------------------------


@pytest.mark.parametrize(("visibility", "owner", "member", "seen"), [
    ("public", OTHER, False, True),
    ("community", OTHER, False, True),
    ("private", MINE, False, True),
    ("private", OTHER, False, False),
    ("private", OTHER, True, False),  # a member of a private image: not shared (yet)
    ("shared", OTHER, True, True),
    ("shared", OTHER, False, False),
    ("shared", MINE, False, True),
])
def test_a_project_sees_public_community_its_own_and_images_shared_with_it(
        visibility, owner, member, seen):
    assert visible_to(image(visibility, owner), MINE, member) is seen


def test_another_projects_private_image_is_not_found_by_id_as_glance_answers_that_project():
    glance = client({f"GET /v2/images/{IMAGE_ID}": response(200, image("private", OTHER)),
                     "GET /v2/images": response(200, {"images": []})})
    with pytest.raises(NotFound, match="no such image visible to project project-mine"):
        glance.find(IMAGE_ID, MINE)


def test_a_shared_image_is_found_once_the_project_is_a_member():
    glance = client({
        f"GET /v2/images/{IMAGE_ID}": response(200, image("shared", OTHER)),
        f"GET /v2/images/{IMAGE_ID}/members/{MINE}": response(200, {"status": "accepted"})})
    assert glance.find(IMAGE_ID, MINE)["id"] == IMAGE_ID


def test_a_name_is_resolved_among_the_images_the_project_sees():
    theirs = image("private", OTHER, image_id="00000000-0000-4000-8000-000000000001")
    ours = image("private", MINE, image_id="00000000-0000-4000-8000-000000000002")
    glance = client({"GET /v2/images": response(200, {"images": [theirs, ours]})})
    assert glance.find("cirros", MINE)["id"] == ours["id"]
    assert glance.session.sent[0] == ("GET", "/v2/images", {"limit": 200, "name": "cirros"})


def test_two_visible_images_of_one_name_are_refused_naming_the_way_out():
    first = image("public", image_id="00000000-0000-4000-8000-000000000001")
    second = image("private", MINE, image_id="00000000-0000-4000-8000-000000000002")
    glance = client({"GET /v2/images": response(200, {"images": [first, second]})})
    with pytest.raises(GlanceError, match="2 images of that name; name one by its id"):
        glance.find("cirros", MINE)


def test_a_name_longer_than_glance_allows_is_not_sent():
    glance = client({})
    with pytest.raises(NotFound):
        glance.find("x" * 300, MINE)
    assert glance.session.sent == []


def test_pages_are_followed_through_glances_next_link():
    second_id = "00000000-0000-4000-8000-000000000002"
    glance = client({
        "GET /v2/images": response(200, {"images": [image()],
                                         "next": f"/v2/images?marker={IMAGE_ID}"}),
        f"GET /v2/images?marker={IMAGE_ID}": response(200, {"images": [image(
            image_id=second_id)]})})
    assert [i["id"] for i in glance.list()] == [IMAGE_ID, second_id]


def test_a_next_link_elsewhere_is_not_followed():
    glance = client({"GET /v2/images": response(200, {"images": [image()],
                                                      "next": "https://evil.invalid/x"})})
    assert len(glance.list()) == 1 and len(glance.session.sent) == 1


# -- errors ------------------------------------------------------------------------------------


def test_refusals_and_server_errors_are_glance_unavailable_in_one_line():
    glance = client({f"GET /v2/images/{IMAGE_ID}": response(
        503, text="<html><body>\n<h1>503</h1>\nService\nUnavailable</body></html>")})
    with pytest.raises(GlanceUnavailable) as caught:
        glance.get(IMAGE_ID)
    assert str(caught.value) == \
        f"Glance: GET /v2/images/{IMAGE_ID}: 503 503 Service Unavailable"
    assert "\n" not in str(caught.value)


def test_a_bad_request_is_a_glance_error_with_its_status():
    glance = client({"POST /v2/images": response(400, text="400 Bad Request\nbad disk")})
    with pytest.raises(GlanceError) as caught:
        glance.create("x", "vmdk")
    assert caught.value.status == 400


def test_unreachable_keystone_or_glance_is_unavailable_naming_the_setting():
    from keystoneauth1 import exceptions as ks_exceptions

    glance = client({f"GET /v2/images/{IMAGE_ID}": ks_exceptions.ConnectFailure("refused")})
    with pytest.raises(GlanceUnavailable, match="is unreachable .*glance.endpoint"):
        glance.get(IMAGE_ID)
    glance = client({f"GET /v2/images/{IMAGE_ID}": ks_exceptions.Unauthorized("no")})
    with pytest.raises(GlanceUnavailable, match=r"refused our credentials \(glance.keystone\)"):
        glance.get(IMAGE_ID)


def test_no_credential_or_a_missing_ca_is_a_config_error():
    with pytest.raises(ConfigError, match="glance.keystone is not set"):
        GlanceClient({"endpoint": ENDPOINT, "keystone": None})
    with pytest.raises(ConfigError, match="glance.ca_cert /nonexistent: no such file"):
        GlanceClient({"endpoint": ENDPOINT, "keystone": KEYSTONE, "ca_cert": "/nonexistent"})


def test_no_endpoint_and_no_image_service_in_the_catalog_says_which_setting():
    glance = GlanceClient({"endpoint": None, "keystone": KEYSTONE})
    glance.session = Session({})
    with pytest.raises(GlanceUnavailable, match="no image service in Keystone's catalog"):
        glance.endpoint  # noqa: B018


def test_an_id_that_is_no_uuid_is_never_sent():
    glance = client({})
    with pytest.raises(NotFound):
        glance.get("../../v2/images")
    assert glance.session.sent == [] and not glance_module.is_image_id("../x")


class BackupGlance:
    """The listing and deleting rotate_backups does, of an instance's images."""

    def __init__(self, images: list[dict[str, Any]]):
        self.images = images
        self.asked: dict[str, str] = {}
        self.deleted: list[str] = []

    def list(self, **filters: str) -> list[dict[str, Any]]:
        self.asked = filters
        return sorted(self.images, key=lambda i: i["created_at"], reverse=True)

    def delete(self, image_id: str) -> None:
        if image_id == "gone":
            raise NotFound(image_id)
        self.deleted.append(image_id)


def backup(image_id: str, created: str, backup_type: str = "daily",
           instance: str = "i1") -> dict[str, Any]:
    return {"id": image_id, "created_at": created, "image_type": "backup",
            "backup_type": backup_type, "instance_uuid": instance}


def test_backup_rotation_keeps_the_newest_of_the_instances_type_as_novas():
    found = BackupGlance([backup("a", "2026-01-01T00:00:01Z"),
                          backup("b", "2026-01-01T00:00:02Z"),
                          backup("c", "2026-01-01T00:00:03Z"),
                          backup("w", "2026-01-01T00:00:00Z", backup_type="weekly"),
                          backup("x", "2026-01-01T00:00:00Z", instance="i2"),
                          {**backup("s", "2026-01-01T00:00:00Z"), "image_type": "snapshot"}])
    assert glance_module.rotate_backups(found, "i1", "daily", 2) == ["a"]  # type: ignore[arg-type]
    assert found.asked["instance_uuid"] == "i1" and found.asked["backup_type"] == "daily"
    assert found.asked["sort_dir"] == "desc"
    found.deleted.clear()
    assert glance_module.rotate_backups(found, "i1", "daily", 0) == ["c", "b", "a"]  # type: ignore[arg-type]


def test_a_backup_deleted_meanwhile_is_no_failure():
    found = BackupGlance([backup("gone", "2026-01-01T00:00:01Z"),
                          backup("b", "2026-01-01T00:00:02Z")])
    assert glance_module.rotate_backups(found, "i1", "daily", 0) == ["b"]  # type: ignore[arg-type]

"""What an imageRef names: a Glance image id the project sees, or a URL we take; and the
image a createImage makes (deleted again when the request is not written)."""

from __future__ import annotations

from typing import Any

import pytest

from etcd_compute.api.objects.images import Image, ImageNotFound, Images
from etcd_compute.errors import NotFound, UsageError
from tests.unit.api.harness import api_config

IMAGE = "0b5d6c43-43f6-4c1e-9f8b-6c5a8a6f2a11"
SHA = "a" * 128


class FakeGlance:
    endpoint = "https://glance.example:9292"

    def __init__(self) -> None:
        self.images: dict[str, dict[str, Any]] = {IMAGE: {
            "id": IMAGE, "name": "guest", "status": "active", "disk_format": "qcow2",
            "container_format": "bare", "os_hash_algo": "sha512", "os_hash_value": SHA,
            "size": 1000, "min_disk": 1, "owner": "p1", "visibility": "private"}}
        self.deleted: list[str] = []
        self.updated: dict[str, dict[str, Any]] = {}

    def find(self, name_or_id: str, project_id: str) -> dict[str, Any]:
        image = self.images.get(name_or_id)
        if image is None or image["owner"] != project_id:
            raise NotFound(name_or_id)
        return image

    def get(self, image_id: str) -> dict[str, Any]:
        return self.images[image_id]

    def create(self, name: str, *_formats: str, **fields: Any) -> dict[str, Any]:
        made = {"id": f"1b5d6c43-43f6-4c1e-9f8b-6c5a8a6f2a{len(self.images):02d}",
                "name": name, **fields}
        self.images[made["id"]] = made
        return made

    def update(self, image_id: str, **changes: Any) -> None:
        self.updated[image_id] = changes

    def delete(self, image_id: str) -> None:
        self.deleted.append(image_id)


def images(glance: FakeGlance | None = None) -> Images:
    found = Images(api_config())
    found.glance = glance
    return found


def test_a_url_only_under_the_prefixes_and_a_glance_id_as_its_project_sees_it():
    assert images().find("file:///dev/null", "p1", {}) == Image("file:///dev/null",
                                                                url="file:///dev/null")
    for ref in ("file:///etc/shadow", "http://169.254.169.254/x", "file:///dev/../etc/x",
                IMAGE, "guest"):
        with pytest.raises(ImageNotFound):
            images().find(ref, "p1", {})  # no Glance here: ids are not found either
    glance = FakeGlance()
    found = images(glance).find(IMAGE, "p1", {"DISK_GB": 1, "MEMORY_MB": 256})
    assert found.id == IMAGE and found.url is None and found.glance["sha512"] == SHA
    assert found.spec_image()["url"] == f"{glance.endpoint}/v2/images/{IMAGE}/file"
    with pytest.raises(ImageNotFound):
        images(glance).find(IMAGE, "p2", {"DISK_GB": 1})  # another project's private one
    with pytest.raises(ImageNotFound):
        images(glance).find("guest", "p1", {"DISK_GB": 1})  # Nova takes ids, not names
    with pytest.raises(UsageError, match="min_disk"):
        images(glance).find(IMAGE, "p1", {"DISK_GB": 0})


def test_a_snapshot_makes_one_image_and_forgets_it_when_asked():
    glance = FakeGlance()
    image_for, forget = images(glance).snapshot("snap", {"purpose": "backup"})
    spec = {"uuid": IMAGE, "project_id": "p1", "resources": {"DISK_GB": 2}, "image": {}}
    first = image_for(spec)
    second = image_for(spec)  # the request tried again: the first image goes
    assert glance.deleted == [first["image_id"]] and second["name"] == "snap"
    assert glance.updated[second["image_id"]] == {"purpose": "backup"}
    made = glance.images[second["image_id"]]
    assert (made["owner"], made["image_type"], made["instance_uuid"]) == ("p1", "snapshot",
                                                                          IMAGE)
    forget()
    assert glance.deleted == [first["image_id"], second["image_id"]]
    with pytest.raises(UsageError, match="need Glance"):
        images().snapshot("snap", {})

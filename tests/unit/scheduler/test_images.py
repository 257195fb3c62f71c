"""scheduler/images.py: a Glance image is resolved for the requesting project and checked
against the request before anything is claimed; the spec carries what the host needs,
never a token."""

from __future__ import annotations

from typing import Any

import pytest

from etcd_compute.errors import GlanceError, NotFound, UsageError
from etcd_compute.scheduler import images
from etcd_compute.scheduler.spec import RequestSpec

ENDPOINT = "https://glance.invalid:9292"
IMAGE_ID = "6f1c1a52-3d4e-4c3b-9a55-2b0c6d8e9f10"
SHA512 = "ab" * 64
RESOURCES = {"VCPU": 1, "MEMORY_MB": 256, "DISK_GB": 1}


def glance_image(**fields: Any) -> dict[str, Any]:
    return {"id": IMAGE_ID, "name": "cirros", "status": "active", "disk_format": "qcow2",
            "container_format": "bare", "os_hash_algo": "sha512", "os_hash_value": SHA512,
            "size": 12345, "min_disk": 0, "min_ram": 0, "visibility": "public",
            "owner": "someone", **fields}


class Glance:
    """Stands in for GlanceClient: `find` answers with one image (or raises)."""

    endpoint = ENDPOINT

    def __init__(self, image: dict[str, Any] | Exception):
        self.image = image
        self.asked: list[tuple[str, str]] = []

    def find(self, name_or_id: str, project_id: str) -> dict[str, Any]:
        self.asked.append((name_or_id, project_id))
        if isinstance(self.image, Exception):
            raise self.image
        return self.image


def test_a_visible_active_image_becomes_what_the_spec_carries():
    glance = Glance(glance_image(architecture="amd64", hypervisor_type="QEMU"))
    found = images.resolve(glance, "cirros", "project-a", RESOURCES)
    assert glance.asked == [("cirros", "project-a")]
    assert found == {"id": IMAGE_ID, "name": "cirros", "sha512": SHA512, "size": 12345,
                     "endpoint": ENDPOINT, "architecture": "x86_64",  # Nova's canonical name
                     "hypervisor_type": "qemu"}
    assert images.spec_image(found) == {
        "url": f"{ENDPOINT}/v2/images/{IMAGE_ID}/file", "sha256": None, "glance": found}
    assert "token" not in repr(found).lower()


def test_nova_style_property_names_win_over_the_legacy_ones():
    found = images.resolve(Glance(glance_image(hw_architecture="aarch64",
                                               architecture="x86_64", img_hv_type="kvm")),
                           IMAGE_ID, "p", RESOURCES)
    assert (found["architecture"], found["hypervisor_type"]) == ("aarch64", "kvm")


@pytest.mark.parametrize(("fields", "resources", "fragment"), [
    ({"status": "queued"}, RESOURCES, "is queued, not active"),
    ({"status": "killed"}, RESOURCES, "is killed, not active"),
    ({"disk_format": "vmdk"}, RESOURCES, "disk_format vmdk cannot be booted"),
    ({"container_format": "docker"}, RESOURCES, "container_format docker cannot be booted"),
    ({"os_hash_algo": "md5"}, RESOURCES, "no sha512"),
    ({"os_hash_value": "zz"}, RESOURCES, "no sha512"),
    ({"size": None}, RESOURCES, "no size"),
    ({"min_disk": 2}, RESOURCES, "needs DISK_GB:2 (min_disk); the request claims DISK_GB:1"),
    ({"min_ram": 512}, RESOURCES, "needs MEMORY_MB:512 (min_ram); the request claims "
                                  "MEMORY_MB:256"),
    ({"virtual_size": 16 * 1024**4}, RESOURCES, "virtual size 16384 GiB is larger than the "
                                                "1 GiB disk"),
    ({"architecture": "x86 64 (pentium)"}, RESOURCES, "is not a architecture name"),
])
def test_what_cannot_boot_is_refused_in_one_line_before_any_claim(fields, resources, fragment):
    with pytest.raises(UsageError) as caught:
        images.resolve(Glance(glance_image(**fields)), "cirros", "p", resources)
    assert fragment in str(caught.value) and "\n" not in str(caught.value)
    assert caught.value.exit_code == 2


def test_an_image_the_project_cannot_see_is_not_found_and_ambiguity_is_named():
    with pytest.raises(UsageError, match="no such image in Glance visible to project alt"):
        images.resolve(Glance(NotFound("x")), "private-of-demo", "alt", RESOURCES)
    with pytest.raises(UsageError, match="2 images of that name"):
        images.resolve(Glance(GlanceError("image 'x': 2 images of that name")), "x", "p",
                       RESOURCES)


def test_a_url_is_a_url_and_anything_else_a_glance_name():
    assert images.is_url("file:///tmp/x.qcow2") and images.is_url("https://a/b")
    assert not images.is_url("cirros") and not images.is_url(IMAGE_ID)


def test_the_request_spec_writes_the_glance_image_or_the_url():
    resolved = images.resolve(Glance(glance_image()), "cirros", "p", RESOURCES)
    spec = RequestSpec.build("resources=VCPU:1,MEMORY_MB:256,DISK_GB:1",
                             glance_image=resolved)
    assert spec.image("https://default") == images.spec_image(resolved)
    assert RequestSpec.build("resources=VCPU:1", image_url="file:///x").image("d") == \
        {"url": "file:///x", "sha256": None}
    with pytest.raises(UsageError, match="not both"):
        RequestSpec.build("resources=VCPU:1", image_url="file:///x", glance_image=resolved)


def test_properties_come_from_a_spec_image_or_a_glance_image():
    resolved = {"id": IMAGE_ID, "architecture": "x86_64", "hypervisor_type": "qemu"}
    assert images.properties(resolved) == {"architecture": "x86_64", "hypervisor_type": "qemu"}
    assert images.properties({"url": "u", "glance": resolved}) == \
        {"architecture": "x86_64", "hypervisor_type": "qemu"}
    assert images.properties({"url": "file:///x", "sha256": None}) == {}
    assert images.properties(None) == {}


class Creating(Glance):
    """Glance's create and get, for a snapshot's image."""

    def __init__(self, base: dict[str, Any] | None = None):
        super().__init__(base or glance_image())
        self.created: list[tuple[str, str, str, dict[str, Any]]] = []

    def get(self, image_id: str) -> dict[str, Any]:
        if isinstance(self.image, Exception):
            raise self.image
        return self.image

    def create(self, name: str, disk_format: str, container_format: str,
               **fields: Any) -> dict[str, Any]:
        self.created.append((name, disk_format, container_format, fields))
        return {"id": "00000000-0000-4000-8000-0000000000ff", **fields}


def test_a_snapshots_image_is_made_as_novas_create_image_makes_it():
    spec = {"uuid": "6f1c1a52-0000-4000-8000-000000000001", "project_id": "demo-id",
            "resources": RESOURCES,
            "image": images.spec_image({"id": IMAGE_ID, "sha512": SHA512, "size": 1,
                                        "endpoint": ENDPOINT, "architecture": "x86_64"})}
    glance = Creating(glance_image(min_ram=128))
    made = images.snapshot_image(glance, spec, " snap1 ")
    assert made == {"image_id": "00000000-0000-4000-8000-0000000000ff", "name": "snap1"}
    assert glance.created == [("snap1", "qcow2", "bare", {
        "owner": "demo-id", "visibility": "private", "image_type": "snapshot",
        "instance_uuid": spec["uuid"], "min_disk": 1, "base_image_ref": IMAGE_ID,
        "architecture": "x86_64", "min_ram": 128})]
    url_booted = {**spec, "image": {"url": "file:///x", "sha256": None}}
    images.snapshot_image(Creating(), url_booted, "snap2")
    with pytest.raises(UsageError, match="snapshot name ''"):
        images.snapshot_image(Creating(), spec, "  ")
    with pytest.raises(UsageError, match="printable"):
        images.snapshot_image(Creating(), spec, "a\nb")

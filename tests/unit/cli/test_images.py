"""cli/images.py: `image list|show|upload|delete` over a stand-in Glance (the real one:
tests/images and the snapshot test under tests/virt)."""

from __future__ import annotations

import argparse
import subprocess
from typing import Any

import pytest

from etcd_compute.cli import images as images_cli
from etcd_compute.errors import NotFound, UsageError
from tests.unit.cli.helpers import UUID, schedule, schedule_usage_error

PROJECT = "00000000-0000-0000-0000-000000000001"
CONFIG = {"scheduler": {"project_id": PROJECT}, "glance": {}}


class Glance:
    def __init__(self, images: list[dict[str, Any]] | None = None, fail: bool = False):
        self.images = {i["id"]: i for i in images or []}
        self.fail = fail
        self.deleted: list[str] = []

    def list(self) -> list[dict[str, Any]]:
        return list(self.images.values())

    def can_see(self, image: dict[str, Any], project: str) -> bool:
        return image.get("visibility") == "public" or image.get("owner") == project

    def find(self, name_or_id: str, project: str) -> dict[str, Any]:
        for image in self.images.values():
            if name_or_id in (image["id"], image.get("name")) and self.can_see(image, project):
                return image
        raise NotFound(f"image {name_or_id!r}: no such image")

    def get(self, image_id: str) -> dict[str, Any]:
        return self.images[image_id]

    def create(self, name: str, disk_format: str, container_format: str,
               **fields: Any) -> dict[str, Any]:
        image = {"id": f"id-{len(self.images)}", "name": name, "status": "queued",
                 "disk_format": disk_format, **fields}
        self.images[image["id"]] = image
        return image

    def upload(self, image_id: str, data: Any, size: int | None = None) -> None:
        if self.fail:
            raise OSError("connection reset")
        self.images[image_id].update(status="active", size=size)

    def delete(self, image_id: str) -> None:
        self.deleted.append(image_id)
        self.images.pop(image_id, None)


def run(glance: Glance, monkeypatch: pytest.MonkeyPatch, action: str, json: bool = False,
        **words: str) -> tuple[int, list[list[str]], list[Any]]:
    """`image ACTION` as the parser hands it to its handler."""
    monkeypatch.setattr(images_cli, "_glance", lambda config: glance)
    rows: list[list[str]] = []
    emitted: list[Any] = []
    monkeypatch.setattr(images_cli.output, "table",
                        lambda body, header: rows.extend([header, *body]))
    monkeypatch.setattr(images_cli.output, "emit_json", emitted.append)
    code = images_cli.cmd_image(argparse.Namespace(action=action, json=json, **words), CONFIG)
    return code, rows, emitted


def test_list_shows_what_the_project_sees(monkeypatch):
    glance = Glance([
        {"id": "a", "name": "cirros", "status": "active", "visibility": "public",
         "owner": "x", "disk_format": "qcow2", "size": 2 * 1024**2},
        {"id": "b", "name": "theirs", "status": "active", "visibility": "private",
         "owner": "x"},
        {"id": "c", "name": "snap1", "status": "active", "visibility": "private",
         "owner": PROJECT, "image_type": "snapshot"}])
    code, rows, _ = run(glance, monkeypatch, "list")
    assert code == 0
    assert rows == [["ID", "NAME", "STATUS", "VISIBILITY", "FORMAT", "SIZE", "TYPE"],
                    ["a", "cirros", "active", "public", "qcow2", "2.0 MiB", "image"],
                    ["c", "snap1", "active", "private", "-", "-", "snapshot"]]


def test_upload_reads_the_format_from_the_bytes_and_leaves_no_half_image(
        monkeypatch, tmp_path, capsys):
    image = tmp_path / "disk.qcow2"
    subprocess.run(["qemu-img", "create", "-q", "-f", "qcow2", str(image), "64M"], check=True)
    glance = Glance()
    assert run(glance, monkeypatch, "upload", file=str(image), name="mine")[0] == 0
    (made,) = glance.images.values()
    assert (made["disk_format"], made["owner"], made["visibility"], made["status"]) == \
        ("qcow2", PROJECT, "private", "active")
    assert capsys.readouterr().out.startswith(f"IMAGE {made['id']} mine ACTIVE (qcow2, ")
    failing = Glance(fail=True)
    with pytest.raises(OSError):
        run(failing, monkeypatch, "upload", file=str(image), name="mine")
    assert failing.images == {} and failing.deleted == ["id-0"]


def test_upload_refuses_what_the_compute_would_refuse(monkeypatch, tmp_path):
    vmdk = tmp_path / "disk.vmdk"
    subprocess.run(["qemu-img", "create", "-q", "-f", "vmdk", str(vmdk), "64M"], check=True)
    with pytest.raises(UsageError, match="a vmdk image \\(qcow2 or raw only\\)"):
        run(Glance(), monkeypatch, "upload", file=str(vmdk), name="x")
    with pytest.raises(UsageError, match="no such file"):
        run(Glance(), monkeypatch, "upload", file=str(tmp_path / "none"), name="x")


def test_show_and_delete_find_the_image_as_the_project_sees_it(monkeypatch, capsys):
    glance = Glance([{"id": "a", "name": "snap1", "status": "active",
                      "visibility": "private", "owner": PROJECT, "min_disk": 1},
                     {"id": "b", "name": "theirs", "visibility": "private", "owner": "x"}])
    code, rows, _ = run(glance, monkeypatch, "show", image="snap1")
    assert code == 0 and ["min_disk", "1"] in rows and ["owner", PROJECT] in rows
    with pytest.raises(NotFound):
        run(glance, monkeypatch, "delete", image="theirs")
    assert run(glance, monkeypatch, "delete", image="a")[0] == 0
    assert glance.deleted == ["a"] and "IMAGE a DELETED" in capsys.readouterr().out


@pytest.mark.parametrize(("words", "fault"), [
    (["image"], "expected image list|show|upload|delete"),
    (["image", "show"], "expected one IMAGE"),
    (["image", "upload", "file"], "expected FILE NAME"),
    (["snapshot", UUID], "expected UUID NAME"),
    (["snapshot", "web-1", "snap"], "'web-1' is not an instance uuid"),
])
def test_malformed_image_commands_are_usage_errors(capsys, config, words, fault):
    schedule_usage_error(schedule(capsys, "--config", str(config), *words), fault)

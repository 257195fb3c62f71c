"""`schedule.py snapshot UUID NAME [--wait]` and `schedule.py image list|show|upload|delete`:
images in Glance, as the `etcd-compute` service user (schedule.yaml's `glance`), for
`scheduler.project_id`."""

from __future__ import annotations

import argparse
import contextlib
from pathlib import Path
from typing import Any

from etcd_compute.cli import Commands, output
from etcd_compute.errors import EtcdComputeError, NotFound, UsageError

IMAGE_ACTIONS = {"list": "the images scheduler.project_id sees",
                 "show": "one image, every field",
                 "upload": "a private image of scheduler.project_id from a qcow2 or raw file",
                 "delete": "delete an image"}
MIB = 1024**2


def add_commands(commands: Commands) -> None:
    snapshot = commands.add("snapshot", "an instance's disk as an image in Glance (live if it "
                                        "runs), owned by its project", "expected UUID NAME",
                            cmd_snapshot)
    snapshot.add_argument("uuid", metavar="UUID")
    snapshot.add_argument("name", metavar="NAME", help="the image's name")
    snapshot.add_argument("--wait", action="store_true",
                          help="follow it until the image is active in Glance")
    image = commands.group("image", "images in Glance: image list|show|upload|delete",
                           f"expected image {'|'.join(IMAGE_ACTIONS)}")
    image.add("list", IMAGE_ACTIONS["list"], "expected no argument", cmd_image)
    show = image.add("show", IMAGE_ACTIONS["show"], "expected one IMAGE", cmd_image)
    show.add_argument("image", metavar="IMAGE", help="its name or id")
    upload = image.add("upload", IMAGE_ACTIONS["upload"], "expected FILE NAME", cmd_image)
    upload.add_argument("file", metavar="FILE")
    upload.add_argument("name", metavar="NAME")
    delete = image.add("delete", IMAGE_ACTIONS["delete"], "expected one IMAGE", cmd_image)
    delete.add_argument("image", metavar="IMAGE", help="its name or id")


def is_url(image: str) -> bool:
    from etcd_compute.scheduler.images import is_url as url

    return url(image)


def glance_image(config: dict[str, Any], name_or_id: str,
                 resources: dict[str, int]) -> dict[str, Any]:
    """`--image NAME|ID` in Glance, as scheduler.project_id sees it (scheduler/images.py)."""
    from etcd_compute.scheduler import images

    return images.resolve(_glance(config), name_or_id, config["scheduler"]["project_id"],
                          resources)


def _glance(config: dict[str, Any]) -> Any:
    from etcd_compute.glance import GlanceClient

    return GlanceClient(config["glance"])


def _find(glance: Any, name_or_id: str, config: dict[str, Any]) -> dict[str, Any]:
    """The image as scheduler.project_id sees it; NotFound (exit 1) otherwise."""
    return glance.find(name_or_id, config["scheduler"]["project_id"])


def _size(image: dict[str, Any]) -> str:
    size = image.get("size")
    return "-" if size is None else f"{size / MIB:.1f} MiB"


def cmd_image(args: argparse.Namespace, config: dict[str, Any]) -> int:
    """image list | show IMAGE | upload FILE NAME | delete IMAGE."""
    glance, project = _glance(config), config["scheduler"]["project_id"]
    if args.action == "list":
        images = [i for i in glance.list() if glance.can_see(i, project)]
        images.sort(key=lambda i: (str(i.get("name") or ""), i["id"]))
        if args.json:
            output.emit_json({"images": images})
            return 0
        output.table([[i["id"], str(i.get("name") or "-"), i.get("status", "-"),
                       i.get("visibility", "-"), str(i.get("disk_format") or "-"), _size(i),
                       i.get("image_type") or "image"] for i in images],
                     ["ID", "NAME", "STATUS", "VISIBILITY", "FORMAT", "SIZE", "TYPE"])
        return 0
    if args.action == "upload":
        return _upload(glance, Path(args.file), args.name, project, args.json)
    image = _find(glance, args.image, config)
    if args.action == "delete":
        glance.delete(image["id"])
        print(f"IMAGE {image['id']} DELETED")
        return 0
    if args.json:
        output.emit_json(image)
        return 0
    shown = ("id", "name", "status", "visibility", "owner", "disk_format", "container_format",
             "size", "virtual_size", "os_hash_algo", "os_hash_value", "min_disk", "min_ram",
             "architecture", "hypervisor_type", "image_type", "instance_uuid",
             "base_image_ref", "created_at", "updated_at")
    output.table([[key, str(image[key])] for key in shown if image.get(key) not in (None, "")],
                 ["FIELD", "VALUE"])
    return 0


def _upload(glance: Any, path: Path, name: str, project: str, as_json: bool) -> int:
    """A private image of scheduler.project_id from a local qcow2 or raw file (its format
    read from its bytes by the format inspector, as the compute reads it)."""
    from oslo_utils.imageutils import format_inspector

    if not path.is_file():
        raise UsageError(f"image upload: {path}: no such file")
    try:
        inspector = format_inspector.detect_file_format(str(path))
        inspector.safety_check()
    except (format_inspector.ImageFormatError, format_inspector.SafetyCheckFailed) as exc:
        raise UsageError(f"image upload: {path}: refused: "
                         f"{str(exc).splitlines()[0] if str(exc) else 'malformed'}") from None
    disk_format = {"gpt": "raw"}.get(str(inspector), str(inspector))
    if disk_format not in ("qcow2", "raw"):
        raise UsageError(f"image upload: {path}: a {disk_format} image (qcow2 or raw only)")
    image = glance.create(name, disk_format, "bare", owner=project, visibility="private")
    try:
        with path.open("rb") as handle:
            glance.upload(image["id"], handle, size=path.stat().st_size)
    except BaseException:
        with contextlib.suppress(Exception):
            glance.delete(image["id"])  # no half image
        raise
    uploaded = glance.get(image["id"])
    if as_json:
        output.emit_json(uploaded)
    else:
        print(f"IMAGE {uploaded['id']} {name} {uploaded['status'].upper()} "
              f"({disk_format}, {_size(uploaded)})")
    return 0


def cmd_snapshot(args: argparse.Namespace, config: dict[str, Any]) -> int:
    """snapshot UUID NAME: a queued Glance image for it, then the host's snapshot action
    (live if the guest runs) uploads into it; --wait follows it until the image is active.
    A refused or failed snapshot leaves no image behind."""
    from etcd_compute.cli import zones as zones_cli
    from etcd_compute.ops import lifecycle, operations
    from etcd_compute.scheduler import images

    uuid, name = operations.check_uuid(args.uuid), args.name
    glance = _glance(config)
    made: list[str] = []

    def image_for(spec: dict[str, Any]) -> dict[str, Any]:
        for image_id in made:  # a retried request (the instance moved): one image only
            with contextlib.suppress(EtcdComputeError):
                glance.delete(image_id)
        made.clear()
        snapshot = images.snapshot_image(glance, spec, name)
        made.append(snapshot["image_id"])
        return snapshot

    with zones_cli.instance_zone(config, uuid) as zone:
        try:
            asked = lifecycle.request(zone.store, zone.placement, uuid, "snapshot",
                                      image_for=image_for)
        except BaseException:
            for image_id in made:  # refused (or cut short) before the host was asked
                with contextlib.suppress(EtcdComputeError):
                    glance.delete(image_id)
            raise
        image_id = asked.request["snapshot"]["image_id"]
        if not args.json:
            print(f"SNAPSHOT REQUESTED FOR INSTANCE {uuid}: IMAGE {image_id} {name}",
                  flush=True)
        if not args.wait:
            if args.json:
                output.emit_json({**asked.as_dict(), "image_id": image_id,
                                  "outcome": "requested"})
            return 0
        outcome = lifecycle.wait(zone.store, asked,
                                 config["scheduler"]["wait_timeout_seconds"],
                                 output.progress_of(args.json))
    try:
        image = glance.get(image_id)
    except NotFound:
        image = None
    ok = outcome.ok and image is not None and image.get("status") == "active"
    if not ok and image is not None:
        with contextlib.suppress(EtcdComputeError):
            glance.delete(image_id)  # the host could not: no half image either way
    if args.json:
        output.emit_json({**asked.as_dict(), "image_id": image_id,
                   "outcome": "done" if ok else "failed", "record": outcome.record,
                   "event": outcome.event, "image": image if ok else None})
    elif ok:
        print(f"IMAGE {image_id} {name} ACTIVE ({_size(image)})")
    else:
        why = outcome.error or f"image {image_id} is {(image or {}).get('status', 'gone')}"
        output.error(f"snapshot of {uuid} failed: {why}")
    return 0 if ok else 1

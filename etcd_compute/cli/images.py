"""`schedule.py snapshot UUID NAME [--wait]` and `schedule.py image list|show|upload|delete`:
images in Glance, as the `etcd-compute` service user (schedule.yaml's `glance`), for
`scheduler.project_id`."""

from __future__ import annotations

import argparse
import contextlib
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from etcd_compute.errors import EtcdComputeError, NotFound, UsageError

IMAGE_ACTIONS = ("list", "show", "upload", "delete")
MIB = 1024**2

Table = Callable[[list[list[str]], list[str]], None]


def _glance(config: dict[str, Any]) -> Any:
    from etcd_compute.glance import GlanceClient

    return GlanceClient(config["glance"])


def _find(glance: Any, name_or_id: str, config: dict[str, Any]) -> dict[str, Any]:
    """The image as scheduler.project_id sees it; NotFound (exit 1) otherwise."""
    return glance.find(name_or_id, config["scheduler"]["project_id"])


def _size(image: dict[str, Any]) -> str:
    size = image.get("size")
    return "-" if size is None else f"{size / MIB:.1f} MiB"


def cmd_image(args: argparse.Namespace, config: dict[str, Any], table: Table,
              emit_json: Callable[[Any], None]) -> int:
    """image list | show IMAGE | upload FILE NAME | delete IMAGE."""
    words = args.words[1:]
    if not words or words[0] not in IMAGE_ACTIONS:
        raise UsageError(f"image: expected one of {', '.join(IMAGE_ACTIONS)}")
    action, rest = words[0], words[1:]
    wanted = {"list": 0, "show": 1, "upload": 2, "delete": 1}[action]
    if len(rest) != wanted:
        usage = {"list": "image list", "show": "image show IMAGE",
                 "upload": "image upload FILE NAME", "delete": "image delete IMAGE"}[action]
        raise UsageError(f"expected: {usage}")
    glance, project = _glance(config), config["scheduler"]["project_id"]
    if action == "list":
        images = [i for i in glance.list() if glance.can_see(i, project)]
        images.sort(key=lambda i: (str(i.get("name") or ""), i["id"]))
        if args.json:
            emit_json({"images": images})
            return 0
        table([[i["id"], str(i.get("name") or "-"), i.get("status", "-"),
                i.get("visibility", "-"), str(i.get("disk_format") or "-"), _size(i),
                i.get("image_type") or "image"] for i in images],
              ["ID", "NAME", "STATUS", "VISIBILITY", "FORMAT", "SIZE", "TYPE"])
        return 0
    if action == "upload":
        return _upload(glance, Path(rest[0]), rest[1], project, args, emit_json)
    image = _find(glance, rest[0], config)
    if action == "delete":
        glance.delete(image["id"])
        print(f"IMAGE {image['id']} DELETED")
        return 0
    if args.json:
        emit_json(image)
        return 0
    shown = ("id", "name", "status", "visibility", "owner", "disk_format", "container_format",
             "size", "virtual_size", "os_hash_algo", "os_hash_value", "min_disk", "min_ram",
             "architecture", "hypervisor_type", "image_type", "instance_uuid",
             "base_image_ref", "created_at", "updated_at")
    table([[key, str(image[key])] for key in shown if image.get(key) not in (None, "")],
          ["FIELD", "VALUE"])
    return 0


def _upload(glance: Any, path: Path, name: str, project: str, args: argparse.Namespace,
            emit_json: Callable[[Any], None]) -> int:
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
    if args.json:
        emit_json(uploaded)
    else:
        print(f"IMAGE {uploaded['id']} {name} {uploaded['status'].upper()} "
              f"({disk_format}, {_size(uploaded)})")
    return 0


def cmd_snapshot(args: argparse.Namespace, config: dict[str, Any],
                 progress: Callable[[str, dict[str, Any] | None], None],
                 emit_json: Callable[[Any], None]) -> int:
    """snapshot UUID NAME: a queued Glance image for it, then the host's snapshot action
    (live if the guest runs) uploads into it; --wait follows it until the image is active.
    A refused or failed snapshot leaves no image behind."""
    from etcd_compute.cli import terminal_line
    from etcd_compute.cli import zones as zones_cli
    from etcd_compute.scheduler import images, lifecycle
    from etcd_compute.scheduler import operations as ops

    if len(args.words) != 3:
        raise UsageError("snapshot: expected UUID NAME")
    uuid, name = ops.check_uuid(args.words[1]), args.words[2]
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
                emit_json({**asked.as_dict(), "image_id": image_id, "outcome": "requested"})
            return 0
        outcome = lifecycle.wait(zone.store, asked,
                                 config["scheduler"]["wait_timeout_seconds"],
                                 (lambda *_: None) if args.json else progress)
    try:
        image = glance.get(image_id)
    except NotFound:
        image = None
    ok = outcome.ok and image is not None and image.get("status") == "active"
    if not ok and image is not None:
        with contextlib.suppress(EtcdComputeError):
            glance.delete(image_id)  # the host could not: no half image either way
    if args.json:
        emit_json({**asked.as_dict(), "image_id": image_id,
                   "outcome": "done" if ok else "failed", "record": outcome.record,
                   "event": outcome.event, "image": image if ok else None})
    elif ok:
        print(f"IMAGE {image_id} {name} ACTIVE ({_size(image)})")
    else:
        why = outcome.error or f"image {image_id} is {(image or {}).get('status', 'gone')}"
        print(terminal_line(f"schedule.py: error: snapshot of {uuid} failed: {why}"),
              file=sys.stderr)
    return 0 if ok else 1

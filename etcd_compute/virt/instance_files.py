"""The per-instance directory `instances_dir/<uuid>/` and what lives in it.

    disk.qcow2    the overlay on the cached base image
    config.iso    the NoCloud config drive
    console.log   the serial console (written by libvirt's virtlogd)
    meta.json     what the metadata server serves to this guest

Everything an instance owns on disk is in this one directory, so destroy is
one rmtree. The directory is world-traversable because qemu runs as its own
user under qemu:///system.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from etcd_compute.keys import UUID
from etcd_compute.virt import disks


@dataclass(frozen=True)
class InstanceFiles:
    directory: Path

    @classmethod
    def of(cls, instances_dir: str | os.PathLike[str], uuid: str) -> InstanceFiles:
        if not UUID.match(uuid):
            # The uuid becomes a path: refuse anything that could leave instances_dir.
            raise ValueError(f"not an instance uuid: {uuid!r}")
        return cls(Path(instances_dir) / uuid)

    @property
    def disk(self) -> Path:
        return self.directory / "disk.qcow2"

    @property
    def config_drive(self) -> Path:
        return self.directory / "config.iso"

    @property
    def console_log(self) -> Path:
        return self.directory / "console.log"

    @property
    def meta(self) -> Path:
        return self.directory / "meta.json"

    def create(self) -> None:
        self.directory.parent.mkdir(parents=True, exist_ok=True, mode=0o755)
        self.directory.mkdir(exist_ok=True)
        self.directory.chmod(0o755)

    def write_meta(self, meta: dict[str, Any]) -> None:
        partial = self.meta.with_suffix(".partial")
        partial.write_text(json.dumps(meta, indent=2, sort_keys=True))
        partial.rename(self.meta)

    def read_meta(self) -> dict[str, Any] | None:
        try:
            return json.loads(self.meta.read_text())
        except (OSError, ValueError):
            return None

    def console_tail(self, max_bytes: int) -> str:
        try:
            with self.console_log.open("rb") as handle:
                size = handle.seek(0, os.SEEK_END)
                handle.seek(max(0, size - max_bytes))
                return handle.read().decode("utf-8", errors="replace")
        except OSError:
            return ""

    def remove(self) -> None:
        shutil.rmtree(self.directory, ignore_errors=True)


def instance_meta(spec: dict[str, Any]) -> dict[str, Any]:
    """meta.json for a spec: what the guest may learn about itself."""
    return {
        "uuid": spec["uuid"],
        "name": spec.get("name") or spec["uuid"],
        "hostname": hostname_for(spec.get("name"), spec["uuid"]),
        "user_data": spec.get("user_data"),
        "ssh_key": spec.get("ssh_key"),
        "created_at": time.time(),
    }


def hostname_for(name: str | None, uuid: str) -> str:
    """A valid host name (RFC 1123 label) from the instance name."""
    label = re.sub(r"[^a-z0-9-]+", "-", (name or "").lower()).strip("-")[:63].strip("-")
    return label or f"instance-{uuid[:8]}"


def bases_in_use(instances_dir: str | os.PathLike[str]) -> set[Path]:
    """Base images that some instance's overlay is backed by."""
    return {
        backing
        for overlay in Path(instances_dir).glob("*/disk.qcow2")
        if (backing := disks.backing_file(overlay)) is not None
    }

"""The per-instance directory `instances_dir/<uuid>/` and what lives in it.

    disk.qcow2    the overlay on the cached base image
    config.iso    the NoCloud config drive
    console.log   the serial console (written by libvirt's virtlogd)
    console.history.log   what the console showed on the hosts it ran on before (a moved
                  guest's), at most CONSOLE_HISTORY_BYTES
    meta.json     what the metadata server serves to this guest
    password      the password the guest POSTed to its metadata server (once; Nova's
                  os-server-password), kept until the compute API clears it
    password.published   the sha256 of the password the compute published to etcd (the
                  metadata server answers the guest's POST once this matches)

Everything an instance owns on disk is in this one directory, so destroy is
one rmtree. It is tenant data: the files are 0600 (libvirt's DAC driver hands
disk and config drive to the qemu user while the guest runs), and the
directories are 0711: qemu, running as its own user under qemu:///system, must
traverse them to open its disks; no other user may list or read them.
"""

from __future__ import annotations

import contextlib
import hashlib
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

# Traversable by qemu (another user), not listable or readable by anyone else.
DIRECTORY_MODE = 0o711
FILE_MODE = 0o600
# How much of a moved guest's earlier console travels with it.
CONSOLE_HISTORY_BYTES = 1 << 20


def write_private(path: Path, content: bytes) -> None:
    """Write `path` (replacing it) readable by its owner only, from the first byte on."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, FILE_MODE)
    with os.fdopen(fd, "wb") as handle:
        handle.write(content)
    os.chmod(path, FILE_MODE)  # an existing file keeps its old mode through O_CREAT


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
    def staged_disk(self) -> Path:
        """A rebuild's new disk, until it replaces the old one."""
        return self.directory / "disk.rebuild.qcow2"

    @property
    def config_drive(self) -> Path:
        return self.directory / "config.iso"

    @property
    def console_log(self) -> Path:
        return self.directory / "console.log"

    @property
    def console_history(self) -> Path:
        return self.directory / "console.history.log"

    @property
    def meta(self) -> Path:
        return self.directory / "meta.json"

    @property
    def password(self) -> Path:
        return self.directory / "password"

    @property
    def password_published(self) -> Path:
        return self.directory / "password.published"

    def keep_password(self, text: str) -> bool:
        """Keep the guest's password unless one is kept already (False then): written whole
        to a file of its own, then linked into place, which fails if `password` exists, so
        two POSTs at once keep one and no reader ever sees part of one."""
        partial = self.directory / f"password.{os.getpid()}.{time.monotonic_ns()}.partial"
        write_private(partial, text.encode())
        try:
            os.link(partial, self.password)
            return True
        except FileExistsError:
            return False
        finally:
            partial.unlink(missing_ok=True)

    def read_password(self) -> str | None:
        """The kept password, None when there is none (or it is not UTF-8 text)."""
        try:
            return self.password.read_bytes().decode("utf-8")
        except (OSError, UnicodeDecodeError):
            return None

    def mark_password_published(self, text: str) -> None:
        """The compute published `text` (the digest of it, written atomically)."""
        partial = self.password_published.with_suffix(".partial")
        write_private(partial, password_digest(text).encode())
        partial.rename(self.password_published)

    def password_is_published(self, text: str) -> bool:
        try:
            return self.password_published.read_text() == password_digest(text)
        except OSError:
            return False

    def clear_password(self) -> None:
        """The password gone (the compute API cleared it): the guest may POST again. The
        password first, so a scan in between never takes the mark for a new one's."""
        for path in (self.password, self.password_published):
            with contextlib.suppress(FileNotFoundError):
                path.unlink()

    def create(self) -> None:
        for directory in (self.directory.parent, self.directory):
            directory.mkdir(parents=True, exist_ok=True, mode=DIRECTORY_MODE)
            if directory.stat().st_mode & 0o777 != DIRECTORY_MODE:
                directory.chmod(DIRECTORY_MODE)

    def write_meta(self, meta: dict[str, Any]) -> None:
        partial = self.meta.with_suffix(".partial")
        write_private(partial, json.dumps(meta, indent=2, sort_keys=True).encode())
        partial.rename(self.meta)

    def read_meta(self) -> dict[str, Any] | None:
        try:
            return json.loads(self.meta.read_text())
        except (OSError, ValueError):
            return None

    def console_tail(self, max_bytes: int) -> str:
        """The last `max_bytes` of the console: its history here and elsewhere, then now."""
        return self.console_bytes(max_bytes).decode("utf-8", errors="replace")

    def console_bytes(self, max_bytes: int) -> bytes:
        tail = b""
        for path in (self.console_log, self.console_history):
            if len(tail) >= max_bytes:
                break
            try:
                with path.open("rb") as handle:
                    size = handle.seek(0, os.SEEK_END)
                    handle.seek(max(0, size - (max_bytes - len(tail))))
                    tail = handle.read() + tail
            except OSError:
                continue
        return tail

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


def password_digest(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


def hostname_for(name: str | None, uuid: str) -> str:
    """A valid host name (RFC 1123 label) from the instance name."""
    label = re.sub(r"[^a-z0-9-]+", "-", (name or "").lower()).strip("-")[:63].strip("-")
    return label or f"instance-{uuid[:8]}"


def bases_in_use(instances_dir: str | os.PathLike[str]) -> set[Path]:
    """Base images that some instance's overlay is backed by."""
    return {
        backing
        # disk.qcow2, and disk.rebuild.qcow2 while a rebuild stages its new disk
        for overlay in Path(instances_dir).glob("*/disk*.qcow2")
        if (backing := disks.backing_file(overlay)) is not None
    }

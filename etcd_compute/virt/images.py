"""The base image cache: one file per image, shared by every instance on the host.

An image is downloaded once (a file lock per URL makes concurrent builds that
ask for the same URL wait for the first download) within the limits of
`sources.SourcePolicy`, its sha256 is checked when the spec carries one, and
then it is inspected before anything runs qemu-img on it: oslo.utils' format
inspector (what Nova uses since OSSA-2024-001) detects the real format from
the bytes and refuses what would read other host files (qcow2 backing and
data files, VMDK extents, ...). Only raw and qcow2 are accepted; raw is
converted to qcow2 once (`qemu-img -f raw`, never a probe), so every base can
carry copy-on-write overlays. An image whose virtual size is larger than the
disk the request claimed is refused.

An image in Glance is keyed by its id and its sha512 (not its URL): an image replaced in
Glance (a new id, or other bytes under its id) is never served from an older download.

Layout of `cache_dir` (0711: qemu, running as another user, must reach the
bases; no one else may list or read them), with KEY the sha256 of the URL (of
`glance:<id>:<sha512>` for an image in Glance):

    KEY.qcow2       the base image (0600; libvirt gives qemu access while it runs)
    KEY.json        url, sha256 of the downloaded bytes, original format, virtual size;
                    its mtime is the last time a build used the image (for LRU)
    KEY.lock        the per-URL lock
    KEY.download    a download in progress      } removed by whoever next holds
    KEY.converting  a conversion in progress    } the URL's lock (`sweep`)
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import time
from collections.abc import Callable, Collection
from pathlib import Path
from typing import Any

import filelock
from oslo_utils.imageutils import format_inspector

from etcd_compute.errors import ConfigError, RequestError
from etcd_compute.virt import qemu_img
from etcd_compute.virt.sources import (
    GlanceSource,
    SourcePolicy,
    copy_glance_image,
    copy_image,
    size_text,
)

log = logging.getLogger(__name__)

GIB = 1024**3
PARTIAL_SUFFIXES = (".download", ".converting")
# What the inspector may call an image we accept: a raw disk with an MBR or GPT
# partition table is "gpt" to it, and raw to qemu.
ACCEPTED_FORMATS = {"raw": "raw", "gpt": "raw", "qcow2": "qcow2"}


def _lock(path: Path) -> filelock.FileLock:
    # One lock object per path and process, so taking it again nests instead of
    # deadlocking; threads still exclude each other (each has its own lock state).
    return filelock.FileLock(str(path), is_singleton=True, mode=0o600)


def _mark_used(record_path: Path) -> None:
    """The record's mtime is the image's last use (for LRU). Set explicitly with
    nanoseconds: the kernel's own timestamps are coarser than two quick builds."""
    now = time.time_ns()
    os.utime(record_path, ns=(now, now))


def _write_private(path: Path, text: str) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o600)
    with os.fdopen(fd, "w") as handle:
        handle.write(text)


def url_key(url: str) -> str:
    return hashlib.sha256(url.encode()).hexdigest()


def cache_key(url: str, glance: dict[str, Any] | None = None) -> str:
    """The cache's name for an image: its URL's, or its Glance id and sha512's."""
    if glance is not None:
        return url_key(f"glance:{glance['id']}:{glance['sha512']}")
    return url_key(url)


def inspect(path: Path, url: str) -> tuple[str, int]:
    """(qemu format, virtual size) of a downloaded image; RequestError if it is refused."""
    try:
        inspector = format_inspector.detect_file_format(str(path))
        if inspector is None:
            raise format_inspector.ImageFormatError("format not recognised")
        inspector.safety_check()
    except format_inspector.SafetyCheckFailed as exc:
        checks = ", ".join(sorted(exc.failures))
        raise RequestError(f"image {url}: refused {inspector} image, failed safety checks: "
                           f"{checks}") from None
    except format_inspector.ImageFormatError as exc:
        reason = str(exc).splitlines()[0] if str(exc) else "malformed"
        raise RequestError(f"image {url}: unrecognised or malformed image: {reason}") from None
    detected = str(inspector)
    if detected not in ACCEPTED_FORMATS:
        raise RequestError(f"image {url}: {detected} images are refused (only raw and qcow2)")
    image_format = ACCEPTED_FORMATS[detected]
    virtual_size = path.stat().st_size if image_format == "raw" else inspector.virtual_size
    return image_format, virtual_size


def check_virtual_size(url: str, virtual_size: int, max_virtual_size: int | None) -> None:
    if max_virtual_size is not None and virtual_size > max_virtual_size:
        raise RequestError(f"image {url}: virtual size {virtual_size / GIB:g} GiB is larger than "
                           f"the {size_text(max_virtual_size)} disk the request claimed "
                           "(DISK_GB)")


class ImageCache:
    """Base images by URL. `in_use()` returns the base paths that overlays still use."""

    def __init__(
        self,
        cache_dir: str | os.PathLike[str],
        max_bytes: int,
        in_use: Callable[[], set[Path]] = set,
        policy: SourcePolicy | None = None,
        glance: Callable[[], Any] | None = None,
    ):
        self.cache_dir = Path(cache_dir)
        self.max_bytes = max_bytes
        self.in_use = in_use
        self.policy = policy or SourcePolicy()
        # This host's Glance client, made when an image in Glance is first downloaded.
        self._glance_factory = glance
        self._glance: Any = None

    def glance(self) -> Any:
        if self._glance is None:
            if self._glance_factory is None:
                raise ConfigError("no glance section (glance.keystone) in this host's config")
            self._glance = self._glance_factory()
        return self._glance

    def base_path(self, url: str, glance: dict[str, Any] | None = None) -> Path:
        return self.cache_dir / f"{cache_key(url, glance)}.qcow2"

    def record_of(self, base: Path) -> dict[str, Any] | None:
        """What the cache knows of one of its bases (url, sha256, ...); None if not its."""
        if base.parent != self.cache_dir or base.suffix != ".qcow2":
            return None
        try:
            record = json.loads(base.with_suffix(".json").read_text())
        except (OSError, ValueError):
            return None
        return record if isinstance(record, dict) else None

    def lock(self, url: str, glance: dict[str, Any] | None = None) -> filelock.FileLock:
        """The per-image lock; hold it while creating an overlay so eviction cannot race."""
        self._make_dir()
        return _lock(self.cache_dir / f"{cache_key(url, glance)}.lock")

    def _make_dir(self) -> None:
        self.cache_dir.mkdir(parents=True, exist_ok=True, mode=0o711)
        if self.cache_dir.stat().st_mode & 0o777 != 0o711:
            self.cache_dir.chmod(0o711)

    def fetch(self, url: str, sha256: str | None = None,
              max_virtual_size: int | None = None,
              glance: dict[str, Any] | None = None) -> Path:
        """The qcow2 base for `url` (or the image in Glance a spec's `image.glance` names),
        downloading, inspecting and converting it if needed.

        RequestError when the image is at fault (refused URL, HTTP error,
        checksum, size, format, a virtual size over `max_virtual_size`). The
        caller should hold `lock(url, glance)` until its overlay exists (it is
        re-entrant, so taking it here again is fine).
        """
        key = cache_key(url, glance)
        base = self.cache_dir / f"{key}.qcow2"
        record_path = self.cache_dir / f"{key}.json"
        if glance is not None:
            url = GlanceSource.of(glance).label  # what its errors and logs call it
        with self.lock(url, glance):
            if base.exists() and record_path.exists():
                record = json.loads(record_path.read_text())
                if sha256 and record["sha256"] != sha256:
                    raise RequestError(
                        f"image {url}: sha256 is {record['sha256']}, expected {sha256}"
                    )
                if "virtual_size" in record:
                    check_virtual_size(url, record["virtual_size"], max_virtual_size)
                _mark_used(record_path)
                return base
            self._remove_partials(key)  # what a killed job left
            record = self._download(url, sha256, base, max_virtual_size, glance)
            _write_private(record_path, json.dumps(record))
            _mark_used(record_path)
        self.evict(keep={base})
        return base

    def _remove_partials(self, key: str) -> None:
        for suffix in PARTIAL_SUFFIXES:
            (self.cache_dir / f"{key}{suffix}").unlink(missing_ok=True)

    def _download(self, url: str, sha256: str | None, base: Path,
                  max_virtual_size: int | None,
                  glance: dict[str, Any] | None = None) -> dict[str, Any]:
        partial = base.with_suffix(".download")
        converting = base.with_suffix(".converting")
        started = time.monotonic()
        log.info("image %s: downloading", url)
        try:
            fd = os.open(partial, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o600)
            with os.fdopen(fd, "wb") as out:
                if glance is not None:
                    copied = copy_glance_image(GlanceSource.of(glance), self.glance,
                                               self.policy, out)
                else:
                    copied = copy_image(url, self.policy, out)
            if sha256 and copied.sha256 != sha256:
                raise RequestError(f"image {url}: sha256 is {copied.sha256}, expected {sha256}")
            image_format, virtual_size = inspect(partial, url)
            check_virtual_size(url, virtual_size, max_virtual_size)
            qemu_img.check_standalone(partial, image_format, f"image {url}")
            if image_format == "qcow2":
                partial.rename(base)
            else:
                log.info("image %s: converting %s to qcow2", url, image_format)
                qemu_img.convert(partial, image_format, converting)
                converting.rename(base)
        except OSError as exc:
            raise RequestError(f"image {url}: {exc.strerror or exc}") from None
        finally:
            partial.unlink(missing_ok=True)
            converting.unlink(missing_ok=True)
        log.info("image %s: %d bytes in %.1fs, %s", url, copied.size,
                 time.monotonic() - started, image_format)
        record = {"url": url, "sha256": copied.sha256, "format": image_format,
                  "bytes": copied.size, "virtual_size": virtual_size}
        if glance is not None:
            record.update(glance_id=glance["id"], sha512=glance["sha512"])
        return record

    def sweep(self) -> list[Path]:
        """Remove partial files of downloads and conversions no one is doing (a killed job's)."""
        removed = []
        for partial in self._files():
            if partial.suffix not in PARTIAL_SUFFIXES:
                continue
            lock = _lock(partial.with_suffix(".lock"))
            try:
                lock.acquire(timeout=0)
            except filelock.Timeout:
                continue  # being written right now
            try:
                partial.unlink(missing_ok=True)
                removed.append(partial)
                log.info("image cache: removed %s (left by an interrupted job)", partial.name)
            finally:
                lock.release()
        return removed

    def _files(self) -> list[Path]:
        try:
            return [p for p in self.cache_dir.iterdir() if p.is_file()]
        except FileNotFoundError:
            return []

    def usage(self) -> int:
        """Bytes the cache directory takes on disk: every file in it counts."""
        total = 0
        for path in self._files():
            try:
                total += path.stat().st_blocks * 512
            except FileNotFoundError:
                continue
        return total

    def evict(self, keep: Collection[Path] = ()) -> list[Path]:
        """Remove least recently used unused bases until the whole cache fits its cap.

        Partial files of interrupted jobs go first; a base without a record (a
        job killed between the two) counts as the least recently used.
        """
        self.sweep()

        def last_used(base: Path) -> float:
            record = base.with_suffix(".json")
            return record.stat().st_mtime if record.exists() else 0.0

        bases = sorted((p for p in self._files() if p.suffix == ".qcow2"), key=last_used)
        total = self.usage()
        removed: list[Path] = []
        for base in bases:
            if total <= self.max_bytes:
                break
            if base in keep:
                continue
            lock = _lock(base.with_suffix(".lock"))
            try:
                lock.acquire(timeout=0)
            except filelock.Timeout:
                continue  # a build is using it right now
            try:
                if base in self.in_use():
                    continue
                size = base.stat().st_blocks * 512
                base.with_suffix(".json").unlink(missing_ok=True)
                base.unlink(missing_ok=True)
                total -= size
                removed.append(base)
                log.info("image cache: evicted %s (%d MiB)", base.name, size >> 20)
            finally:
                lock.release()
        return removed

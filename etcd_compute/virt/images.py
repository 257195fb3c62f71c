"""The base image cache: one file per image URL, shared by every instance on the host.

An image is downloaded once (a file lock per URL makes concurrent builds that
ask for the same URL wait for the first download), its sha256 is checked when
the spec carries one, and anything that is not qcow2 is converted to qcow2
once, so every base can carry copy-on-write overlays.

Layout of `cache_dir`, with KEY the sha256 of the URL:

    KEY.qcow2      the base image
    KEY.json       url, sha256 of the downloaded bytes, original format; its
                   mtime is the last time a build used the image (for LRU)
    KEY.lock       the per-URL lock
    KEY.download   a download in progress
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import shutil
import subprocess
import time
import urllib.parse
from collections.abc import Callable, Collection, Iterator
from pathlib import Path
from typing import Any

import filelock
import requests

from etcd_compute.errors import BuildError

log = logging.getLogger(__name__)

CHUNK_BYTES = 1024 * 1024
PROGRESS_INTERVAL_SECONDS = 5.0
# Connect and per-read timeouts of an HTTP download (a stalled server fails the build).
HTTP_TIMEOUT = (10, 60)


def qemu_img_info(path: Path, image_format: str | None = None) -> dict[str, Any]:
    """`qemu-img info --output=json` of `path` (format probed unless given)."""
    command = ["qemu-img", "info", "--output=json"]
    if image_format:
        command += ["-f", image_format]
    result = subprocess.run(
        [*command, str(path)], capture_output=True, text=True, check=False
    )
    if result.returncode != 0:
        reason = (result.stderr.strip().splitlines() or ["failed"])[-1]
        raise BuildError(f"qemu-img info {path.name}: {reason}")
    return json.loads(result.stdout)


def _lock(path: Path) -> filelock.FileLock:
    # One lock object per path and process, so taking it again nests instead of
    # deadlocking; threads still exclude each other (each has its own lock state).
    return filelock.FileLock(str(path), is_singleton=True)


def _mark_used(record_path: Path) -> None:
    """The record's mtime is the image's last use (for LRU). Set explicitly with
    nanoseconds: the kernel's own timestamps are coarser than two quick builds."""
    now = time.time_ns()
    os.utime(record_path, ns=(now, now))


def url_key(url: str) -> str:
    return hashlib.sha256(url.encode()).hexdigest()


def _read_chunks(url: str) -> tuple[Iterator[bytes], int | None]:
    """The bytes behind `url` in chunks, and the total size if known."""
    parsed = urllib.parse.urlparse(url)
    if parsed.scheme == "file":
        path = Path(urllib.parse.unquote(parsed.path))
        try:
            handle = path.open("rb")
        except OSError as exc:
            raise BuildError(f"image {url}: {exc.strerror}") from None

        def file_chunks() -> Iterator[bytes]:
            with handle:
                while chunk := handle.read(CHUNK_BYTES):
                    yield chunk

        return file_chunks(), path.stat().st_size
    if parsed.scheme in ("http", "https"):
        try:
            response = requests.get(url, stream=True, timeout=HTTP_TIMEOUT)
        except requests.RequestException as exc:
            raise BuildError(f"image {url}: download failed: {type(exc).__name__}") from None
        if response.status_code != 200:
            response.close()
            raise BuildError(f"image {url}: HTTP {response.status_code}")
        length = response.headers.get("Content-Length")
        return response.iter_content(CHUNK_BYTES), int(length) if length else None
    raise BuildError(f"image {url}: unsupported URL scheme {parsed.scheme!r}")


class ImageCache:
    """Base images by URL. `in_use()` returns the base paths that overlays still use."""

    def __init__(
        self,
        cache_dir: str | os.PathLike[str],
        max_bytes: int,
        in_use: Callable[[], set[Path]] = set,
    ):
        self.cache_dir = Path(cache_dir)
        self.max_bytes = max_bytes
        self.in_use = in_use

    def base_path(self, url: str) -> Path:
        return self.cache_dir / f"{url_key(url)}.qcow2"

    def lock(self, url: str) -> filelock.FileLock:
        """The per-URL lock; hold it while creating an overlay so eviction cannot race."""
        self.cache_dir.mkdir(parents=True, exist_ok=True, mode=0o755)
        return _lock(self.cache_dir / f"{url_key(url)}.lock")

    def fetch(self, url: str, sha256: str | None = None) -> Path:
        """The qcow2 base for `url`, downloading and converting it if needed.

        The caller should hold `lock(url)` until its overlay exists (it is
        re-entrant, so taking it here again is fine).
        """
        key = url_key(url)
        base = self.cache_dir / f"{key}.qcow2"
        record_path = self.cache_dir / f"{key}.json"
        with self.lock(url):
            if base.exists() and record_path.exists():
                record = json.loads(record_path.read_text())
                if sha256 and record["sha256"] != sha256:
                    raise BuildError(
                        f"image {url}: sha256 is {record['sha256']}, expected {sha256}"
                    )
                _mark_used(record_path)
                return base
            record = self._download(url, sha256, base)
            record_path.write_text(json.dumps(record))
            _mark_used(record_path)
        self.evict(keep={base})
        return base

    def _download(self, url: str, sha256: str | None, base: Path) -> dict[str, Any]:
        partial = base.with_suffix(".download")
        digest = hashlib.sha256()
        received = 0
        started = last_report = time.monotonic()
        log.info("image %s: downloading", url)
        try:
            chunks, total = _read_chunks(url)
            with partial.open("wb") as out:
                for chunk in chunks:
                    out.write(chunk)
                    digest.update(chunk)
                    received += len(chunk)
                    if time.monotonic() - last_report >= PROGRESS_INTERVAL_SECONDS:
                        last_report = time.monotonic()
                        share = f" ({100 * received // total}%)" if total else ""
                        log.info("image %s: %d MiB%s", url, received >> 20, share)
            actual = digest.hexdigest()
            if sha256 and actual != sha256:
                raise BuildError(f"image {url}: sha256 is {actual}, expected {sha256}")
            info = qemu_img_info(partial)
            if info.get("backing-filename"):
                # A downloaded qcow2 pointing at a host file would read that file.
                raise BuildError(f"image {url}: images with a backing file are refused")
            original_format = info["format"]
            if original_format == "qcow2":
                partial.rename(base)
            else:
                log.info("image %s: converting %s to qcow2", url, original_format)
                _convert_to_qcow2(partial, original_format, base)
        except requests.RequestException as exc:
            raise BuildError(f"image {url}: download failed: {type(exc).__name__}") from None
        except OSError as exc:
            raise BuildError(f"image {url}: {exc}") from None
        finally:
            partial.unlink(missing_ok=True)
        seconds = time.monotonic() - started
        log.info("image %s: %d bytes in %.1fs, %s", url, received, seconds, original_format)
        return {"url": url, "sha256": actual, "format": original_format, "bytes": received}

    def evict(self, keep: Collection[Path] = ()) -> list[Path]:
        """Remove least recently used unused bases until the cache fits its cap."""
        bases = sorted(
            (p for p in self.cache_dir.glob("*.qcow2") if p.with_suffix(".json").exists()),
            key=lambda p: p.with_suffix(".json").stat().st_mtime,
        )
        total = sum(p.stat().st_size for p in bases)
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
                size = base.stat().st_size
                base.with_suffix(".json").unlink(missing_ok=True)
                base.unlink(missing_ok=True)
                total -= size
                removed.append(base)
                log.info("image cache: evicted %s (%d MiB)", base.name, size >> 20)
            finally:
                lock.release()
        return removed


def _convert_to_qcow2(source: Path, source_format: str, base: Path) -> None:
    converting = base.with_suffix(".converting")
    result = subprocess.run(
        ["qemu-img", "convert", "-f", source_format, "-O", "qcow2", str(source), str(converting)],
        capture_output=True,
        text=True,
        check=False,
    )
    if result.returncode != 0:
        converting.unlink(missing_ok=True)
        reason = (result.stderr.strip().splitlines() or ["failed"])[-1]
        raise BuildError(f"qemu-img convert: {reason}")
    shutil.move(converting, base)

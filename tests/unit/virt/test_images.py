"""images.py: the base image cache's own decisions: which formats are taken and as what, the
virtual size against the claim, the checksum, what a hit, a refusal or a killed job leaves,
modes, LRU eviction. Images are crafted headers read by the real format inspector; file://
sources in tmp dirs; qemu-img is stood in for (the real one, and HTTP sources, are in
tests/virt/test_images.py and test_image_attacks.py)."""

from __future__ import annotations

import hashlib
import json
import os
import stat
import struct
import threading
from pathlib import Path
from typing import Any

import pytest

from etcd_compute.errors import BuildError, RequestError
from etcd_compute.virt import images, qemu_img
from etcd_compute.virt.images import ImageCache, check_virtual_size, inspect
from etcd_compute.virt.sources import SourcePolicy

GIB = 1024**3


def qcow2(size: int = GIB, backing_offset: int = 0, incompatible: int = 0) -> bytes:
    """A qcow2 v3 header as the inspector reads it: magic, version, backing file, cluster
    bits, virtual size, and the incompatible features (bit 2: an external data file)."""
    header = b"QFI\xfb" + struct.pack(">IQIIQ", 3, backing_offset, 0, 16, size)
    return (header.ljust(0x48, b"\0") + struct.pack(">Q", incompatible)).ljust(4096, b"\0")


def gpt_disk() -> bytes:
    """A raw disk with a protective MBR (GPT): the inspector says gpt, qemu says raw."""
    mbr = bytearray(512)
    mbr[446:462] = bytes([0, 0, 2, 0, 0xEE, 0xFF, 0xFF, 0xFF]) + struct.pack("<II", 1, 2**32 - 1)
    mbr[510:512] = b"\x55\xaa"
    return bytes(mbr) + b"\0" * 4096


# -- what an image is -----------------------------------------------------------------------


@pytest.mark.parametrize(("content", "expected"), [
    (b"\0" * 8192, ("raw", 8192)),                   # raw: its size is its file's
    (gpt_disk(), ("raw", 4608)),
    (qcow2(5 * GIB), ("qcow2", 5 * GIB)),            # qcow2: the size its header declares
])
def test_raw_and_qcow2_are_taken_with_their_virtual_size(tmp_path, content, expected):
    path = tmp_path / "image"
    path.write_bytes(content)
    assert inspect(path, "u") == expected


@pytest.mark.parametrize(("content", "fault"), [
    (qcow2(backing_offset=512), "image u: refused qcow2 image, failed safety checks: "
                                "backing_file"),
    (qcow2(incompatible=4), "image u: refused qcow2 image, failed safety checks: data_file"),
    (b"conectix".ljust(1024, b"\0"), "image u: vhd images are refused (only raw and qcow2)"),
    (b"\0" * 64 + struct.pack("<I", 0xBEDA107F) + b"\0" * 1024,
     "image u: vdi images are refused (only raw and qcow2)"),
])
def test_other_formats_and_unsafe_qcow2_are_the_requests_fault(tmp_path, content, fault):
    path = tmp_path / "image"
    path.write_bytes(content)
    with pytest.raises(RequestError) as caught:
        inspect(path, "u")
    assert str(caught.value) == fault


def test_the_virtual_size_may_fill_the_claim_but_not_exceed_it():
    check_virtual_size("u", GIB, GIB)
    check_virtual_size("u", 100 * GIB, None)  # no claim to hold it to
    with pytest.raises(RequestError) as caught:
        check_virtual_size("u", GIB + 1, GIB)
    assert str(caught.value) == ("image u: virtual size 1 GiB is larger than the 1 GiB disk "
                                 "the request claimed (DISK_GB)")


# -- the cache ------------------------------------------------------------------------------


class QemuImg:
    """qemu-img's second opinion (agrees) and its conversion (a qcow2 of the raw bytes)."""

    def __init__(self) -> None:
        self.converted: list[str] = []
        self.fail_convert: Exception | None = None
        self.disagree = False

    def check_standalone(self, path: Path, image_format: str, what: str) -> dict[str, str]:
        if self.disagree:
            raise RequestError(f"{what}: images with a backing file are refused")
        return {"format": image_format}

    def convert(self, source: Path, source_format: str, target: Path) -> None:
        self.converted.append(source_format)
        target.write_bytes(b"QFI\xfb converted " + source.read_bytes()[:16])
        if self.fail_convert:
            raise self.fail_convert


@pytest.fixture
def qemu(monkeypatch: pytest.MonkeyPatch) -> QemuImg:
    fake = QemuImg()
    monkeypatch.setattr(qemu_img, "check_standalone", fake.check_standalone)
    monkeypatch.setattr(qemu_img, "convert", fake.convert)
    return fake


class Source:
    """An allowed file:// directory and a cache that may read from it."""

    def __init__(self, tmp_path: Path):
        self.dir = tmp_path / "source"
        self.dir.mkdir()
        self.cache = ImageCache(tmp_path / "cache", 10 * GIB,
                                policy=SourcePolicy(file_dirs=(str(self.dir),)))

    def image(self, name: str, content: bytes) -> str:
        (self.dir / name).write_bytes(content)
        return f"file://{self.dir}/{name}"

    def files(self) -> list[str]:
        """What the cache holds, but the per-URL locks."""
        return sorted(p.name for p in self.cache.cache_dir.iterdir() if p.suffix != ".lock")


@pytest.fixture
def source(tmp_path: Path, qemu: QemuImg) -> Source:
    return Source(tmp_path)


def test_a_qcow2_is_kept_as_it_came_with_its_record(source):
    body = qcow2(2 * GIB)
    url = source.image("a.qcow2", body)
    base = source.cache.fetch(url, hashlib.sha256(body).hexdigest(), max_virtual_size=2 * GIB)
    assert base == source.cache.base_path(url) and base.read_bytes() == body
    record = json.loads(base.with_suffix(".json").read_text())
    assert record == {"url": url, "sha256": hashlib.sha256(body).hexdigest(), "format": "qcow2",
                      "bytes": len(body), "virtual_size": 2 * GIB}
    # qemu (another user) may reach the bases, no one may list them; tenant data is ours.
    assert stat.S_IMODE(source.cache.cache_dir.stat().st_mode) == 0o711
    for path in (base, base.with_suffix(".json")):
        assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert source.files() == [base.with_suffix(".json").name, base.name]


def test_the_record_of_a_base_is_found_from_its_path_and_only_for_the_cache_s_bases(source,
                                                                                  tmp_path):
    body = qcow2()
    url = source.image("a.qcow2", body)
    base = source.cache.fetch(url)
    assert source.cache.record_of(base)["sha256"] == hashlib.sha256(body).hexdigest()
    assert source.cache.record_of(tmp_path / "elsewhere" / base.name) is None
    assert source.cache.record_of(base.with_suffix(".json")) is None
    base.with_suffix(".json").write_text("{half")
    assert source.cache.record_of(base) is None


def test_a_raw_image_is_converted_once(source, qemu):
    url = source.image("a.raw", b"\1" * 8192)
    base = source.cache.fetch(url)
    assert base.read_bytes().startswith(b"QFI\xfb converted ")
    assert json.loads(base.with_suffix(".json").read_text())["format"] == "raw"
    assert source.cache.fetch(url) == base
    assert qemu.converted == ["raw"]


def test_a_hit_reads_no_source_and_marks_the_image_used(source):
    url = source.image("a.qcow2", qcow2())
    base = source.cache.fetch(url)
    record = base.with_suffix(".json")
    os.utime(record, ns=(1, 1))
    (source.dir / "a.qcow2").unlink()  # a second download would fail
    assert source.cache.fetch(url) == base
    assert record.stat().st_mtime_ns > 1


def test_a_hit_holds_the_image_to_the_new_claim_and_checksum(source):
    body = qcow2(4 * GIB)
    url = source.image("a.qcow2", body)
    base = source.cache.fetch(url)
    with pytest.raises(RequestError, match="virtual size 4 GiB is larger than the 2 GiB disk"):
        source.cache.fetch(url, max_virtual_size=2 * GIB)
    with pytest.raises(RequestError) as caught:
        source.cache.fetch(url, "0" * 64)
    assert str(caught.value) == (f"image {url}: sha256 is {hashlib.sha256(body).hexdigest()}, "
                                 f"expected {'0' * 64}")
    assert base.exists()  # another request's fault is no reason to drop the base


@pytest.mark.parametrize(("content", "fetch", "fault"), [
    (qcow2(), {"sha256": "0" * 64}, "expected " + "0" * 64),
    (qcow2(3 * GIB), {"max_virtual_size": GIB}, "virtual size 3 GiB is larger"),
    (qcow2(backing_offset=512), {}, "failed safety checks: backing_file"),
    (b"conectix".ljust(1024, b"\0"), {}, "vhd images are refused"),
])
def test_a_refused_download_leaves_nothing(source, content, fetch, fault):
    url = source.image("bad", content)
    with pytest.raises(RequestError, match=fault):
        source.cache.fetch(url, **fetch)
    assert source.files() == []


def test_qemu_img_is_asked_too_before_the_image_is_used(source, qemu):
    qemu.disagree = True
    url = source.image("a.qcow2", qcow2())
    with pytest.raises(RequestError) as caught:
        source.cache.fetch(url)
    assert str(caught.value) == f"image {url}: images with a backing file are refused"
    assert source.files() == []


def test_a_failed_conversion_leaves_nothing(source, qemu):
    qemu.fail_convert = BuildError("qemu-img convert: killed by signal 9 (resource limit)")
    with pytest.raises(BuildError, match="killed by signal 9"):
        source.cache.fetch(source.image("a.raw", b"\1" * 8192))
    assert source.files() == []


def test_a_host_fault_while_downloading_is_one_line(source, monkeypatch):
    def full(*_args: object) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(images, "copy_image", full)
    url = source.image("a.qcow2", qcow2())
    with pytest.raises(RequestError) as caught:
        source.cache.fetch(url)
    assert str(caught.value) == f"image {url}: No space left on device"
    assert source.files() == []


def test_what_a_killed_job_left_for_the_url_does_not_stop_the_next_download(source):
    url = source.image("a.qcow2", qcow2())
    source.cache.lock(url)  # makes the directory
    for suffix in images.PARTIAL_SUFFIXES:
        source.cache.base_path(url).with_suffix(suffix).write_bytes(b"left by a killed job")
    base = source.cache.fetch(url)
    assert source.files() == [base.with_suffix(".json").name, base.name]


# -- eviction ----------------------------------------------------------------------------


def base(cache: ImageCache, name: str, size: int, used_ns: int | None) -> Path:
    """A base of `size` bytes; its record's mtime is its last use (None: no record)."""
    cache.lock(name)
    path = cache.base_path(name)
    path.write_bytes(b"b" * size)
    if used_ns is not None:
        record = path.with_suffix(".json")
        record.write_text("{}")
        os.utime(record, ns=(used_ns, used_ns))
    return path


def test_eviction_takes_least_recently_used_bases_nothing_uses_until_the_cache_fits(tmp_path):
    in_use: set[Path] = set()
    cache = ImageCache(tmp_path / "cache", 0, in_use=lambda: in_use)
    mib = 1024**2
    orphan = base(cache, "orphan", mib, None)       # no record: a job died before writing it
    oldest = base(cache, "oldest", mib, 10**9)
    used = base(cache, "used", mib, 2 * 10**9)      # an overlay uses it
    locked = base(cache, "locked", mib, 3 * 10**9)  # a build holds its lock right now
    kept = base(cache, "kept", mib, 4 * 10**9)      # the one just fetched
    newest = base(cache, "newest", mib, 5 * 10**9)
    in_use.add(used)
    holding, release = threading.Event(), threading.Event()

    def build_holding_the_lock() -> None:
        with cache.lock("locked"):
            holding.set()
            release.wait(10)

    builder = threading.Thread(target=build_holding_the_lock)
    builder.start()
    holding.wait(10)
    try:
        cache.max_bytes = cache.usage() - 2 * mib  # room for all but two bases
        assert cache.evict(keep={kept}) == [orphan, oldest]
        cache.max_bytes = 0
        assert cache.evict(keep={kept}) == [newest]
    finally:
        release.set()
        builder.join()
    assert used.exists() and locked.exists() and kept.exists()
    assert not oldest.with_suffix(".json").exists()  # its record goes with it


# -- images in Glance -------------------------------------------------------------------------


class GlanceDownloads:
    """This host's Glance, as the cache asks it: the bytes of each image id."""

    endpoint = "https://glance.invalid:9292"

    def __init__(self) -> None:
        self.bytes: dict[str, bytes] = {}
        self.downloads: list[str] = []

    def download(self, image_id: str, timeout: Any = None) -> Any:
        import io

        import requests
        import urllib3

        self.downloads.append(image_id)
        response = requests.Response()
        response.status_code = 200
        response.raw = urllib3.HTTPResponse(io.BytesIO(self.bytes[image_id]),
                                            preload_content=False)
        return response

    def image(self, image_id: str, body: bytes) -> dict[str, Any]:
        self.bytes[image_id] = body
        return {"id": image_id, "sha512": hashlib.sha512(body).hexdigest(), "size": len(body),
                "endpoint": self.endpoint}


def test_images_in_glance_are_cached_by_id_and_sha512_never_served_stale(tmp_path, qemu):
    glance = GlanceDownloads()
    cache = ImageCache(tmp_path / "cache", 10 * GIB, glance=lambda: glance)
    image_id = "6f1c1a52-3d4e-4c3b-9a55-2b0c6d8e9f10"
    first = glance.image(image_id, qcow2())
    url = f"{glance.endpoint}/v2/images/{image_id}/file"
    base = cache.fetch(url, glance=first)
    assert cache.fetch(url, glance=first) == base and glance.downloads == [image_id]  # a hit
    record = json.loads(base.with_suffix(".json").read_text())
    assert (record["glance_id"], record["sha512"]) == (image_id, first["sha512"])
    # Other bytes under the same id (and so the same URL): another entry, downloaded again.
    second = glance.image(image_id, qcow2(2 * GIB))
    other = cache.fetch(url, glance=second)
    assert other != base and other.read_bytes() == glance.bytes[image_id]
    assert glance.downloads == [image_id, image_id]
    assert cache.base_path(url, second) == other != cache.base_path(url)


def test_a_host_without_glance_settings_cannot_build_from_glance_but_says_so(tmp_path, qemu):
    from etcd_compute.errors import BuildError

    cache = ImageCache(tmp_path / "cache", 10 * GIB)
    image = GlanceDownloads().image("6f1c1a52-3d4e-4c3b-9a55-2b0c6d8e9f10", qcow2())
    with pytest.raises(BuildError, match="this host cannot reach Glance: no glance section"):
        cache.fetch("https://glance.invalid:9292/x", glance=image)

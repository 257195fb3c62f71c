"""Hostile images and image URLs against the real image cache: real qemu-img, real HTTP
servers on 127.0.0.1. Each attack ends in one RequestError line, reads nothing it should
not, and leaves no file in the cache and no qemu-img process behind."""

from __future__ import annotations

import gzip
import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from etcd_compute.errors import RequestError
from etcd_compute.virt import qemu_img
from etcd_compute.virt.images import ImageCache
from etcd_compute.virt.sources import SourcePolicy
from tests.virt import image_sources
from tests.virt.image_sources import ScriptedServer, leftover_children, run_limited

GIB = 1024**3
MIB = 1024**2


@pytest.fixture
def server() -> Iterator[ScriptedServer]:
    scripted = ScriptedServer()
    yield scripted
    scripted.close()


@pytest.fixture
def allowed(tmp_path: Path) -> Path:
    """The one directory file:// images may come from in these tests."""
    directory = tmp_path / "allowed"
    directory.mkdir()
    return directory


def cache_for(tmp_path: Path, allowed: Path | None = None, **limits: object) -> ImageCache:
    policy = SourcePolicy(file_dirs=(str(allowed),) if allowed else (), **limits)
    return ImageCache(tmp_path / "cache", 10 * GIB, policy=policy)


def cache_files(cache: ImageCache) -> list[str]:
    """Everything in the cache but the per-URL lock files."""
    if not cache.cache_dir.exists():
        return []
    return sorted(p.name for p in cache.cache_dir.iterdir() if p.suffix != ".lock")


def refused(cache: ImageCache, url: str, *fragments: str, **fetch: object) -> str:
    """The fetch fails with one RequestError line naming each fragment, leaving nothing."""
    with pytest.raises(RequestError) as caught:
        cache.fetch(url, **fetch)
    message = str(caught.value)
    assert "\n" not in message, message
    for fragment in fragments:
        assert fragment in message, message
    assert cache_files(cache) == []
    assert list(leftover_children()) == []
    return message


# -- file:// ------------------------------------------------------------------------------


def test_a_host_file_url_is_refused_without_reading_it(tmp_path: Path, allowed: Path) -> None:
    cache = cache_for(tmp_path, allowed)
    refused(cache, "file:///etc/shadow", "not under a directory allowed")
    refused(cache, f"file://{allowed}/../../../../etc/shadow", "not under a directory allowed")
    (allowed / "link.img").symlink_to("/etc/shadow")
    refused(cache, f"file://{allowed}/link.img", "not under a directory allowed")
    # Whether a file outside exists is not told.
    refused(cache, "file:///etc/no-such-file", "not under a directory allowed")


def test_file_urls_are_refused_when_no_directory_is_configured(tmp_path: Path) -> None:
    image = image_sources.qcow2(tmp_path / "ok.qcow2")
    refused(cache_for(tmp_path), f"file://{image}", "file:// images are not allowed")


def test_an_image_under_an_allowed_directory_is_used(tmp_path: Path, allowed: Path) -> None:
    image = image_sources.qcow2(allowed / "ok.qcow2")
    cache = cache_for(tmp_path, allowed)
    assert cache.fetch(f"file://{image}").read_bytes() == image.read_bytes()
    refused(cache_for(tmp_path / "other", allowed), f"file://{allowed}/missing.qcow2",
            "No such file")


def test_an_endless_file_source_ends(tmp_path: Path) -> None:
    """file:///dev/zero, even from an allowed /dev: refused at once, nothing written."""
    cache = cache_for(tmp_path, Path("/dev"), max_bytes=64 * MIB)
    outcome = run_limited(lambda: cache.fetch("file:///dev/zero"), limit=10)
    assert outcome.finished, f"still reading after {outcome.seconds:.1f} s"
    assert outcome.error_type == "RequestError", outcome
    assert "not a regular file" in outcome.error
    assert cache_files(cache) == []


def test_a_large_file_stops_at_the_size_limit(tmp_path: Path, allowed: Path) -> None:
    sparse = allowed / "huge.raw"
    with sparse.open("wb") as handle:
        handle.truncate(64 * GIB)  # sparse: 64 GiB to read, nothing on disk
    cache = cache_for(tmp_path, allowed, max_bytes=16 * MIB)
    outcome = run_limited(lambda: cache.fetch(f"file://{sparse}"), limit=20)
    assert outcome.finished, f"still reading after {outcome.seconds:.1f} s"
    assert outcome.error_type == "RequestError" and "size limit" in outcome.error, outcome
    assert cache_files(cache) == []


# -- image formats --------------------------------------------------------------------------


def test_a_vmdk_descriptor_naming_a_host_file_is_refused(
    tmp_path: Path, server: ScriptedServer
) -> None:
    server.routes["/disk.vmdk"] = image_sources.body(
        image_sources.vmdk_descriptor("/etc/shadow"))
    message = refused(cache_for(tmp_path), server.url("/disk.vmdk"), "vmdk")
    assert "shadow" not in message.replace("/etc/shadow", "")  # nothing of it was read


def test_a_qcow2_with_an_external_data_file_is_refused(
    tmp_path: Path, server: ScriptedServer
) -> None:
    secret = tmp_path / "host-secret.raw"
    image = image_sources.qcow2_with_data_file(tmp_path, secret)
    secret.write_bytes(b"HOST SECRET " * 1000)
    server.routes["/data-file.qcow2"] = image_sources.body(image.read_bytes())
    refused(cache_for(tmp_path), server.url("/data-file.qcow2"), "data_file")


def test_a_qcow2_with_a_backing_file_is_refused(tmp_path: Path, server: ScriptedServer) -> None:
    image = image_sources.qcow2(tmp_path / "child.qcow2", "1M", "-F", "raw", "-b", "/etc/shadow")
    server.routes["/child.qcow2"] = image_sources.body(image.read_bytes())
    refused(cache_for(tmp_path), server.url("/child.qcow2"), "backing_file")


@pytest.mark.parametrize(("name", "make"), [
    ("vhd", lambda p: image_sources.converted(p, "vpc")),
    ("vdi", lambda p: image_sources.converted(p, "vdi")),
])
def test_formats_other_than_raw_and_qcow2_are_refused(
    tmp_path: Path, server: ScriptedServer, name: str, make
) -> None:
    server.routes[f"/image.{name}"] = image_sources.body(make(tmp_path).read_bytes())
    refused(cache_for(tmp_path), server.url(f"/image.{name}"), f"{name} images are refused")


def test_an_oversized_virtual_disk_is_refused(tmp_path: Path, server: ScriptedServer) -> None:
    """A 200 KB qcow2 that declares 16 TiB: refused for a 1 GiB disk, before conversion."""
    image = image_sources.qcow2(tmp_path / "huge.qcow2", "16T")
    assert image.stat().st_size < 1024 * 1024
    server.routes["/huge.qcow2"] = image_sources.body(image.read_bytes())
    refused(cache_for(tmp_path), server.url("/huge.qcow2"), "virtual size 16384 GiB",
            "larger than the 1 GiB disk", max_virtual_size=1 * GIB)


# -- http(s):// -----------------------------------------------------------------------------


def test_a_gzip_bomb_stops_at_the_size_limit(tmp_path: Path, server: ScriptedServer) -> None:
    bomb = gzip.compress(b"\0" * (256 * MIB), compresslevel=9)
    assert len(bomb) < 1024 * 1024
    server.routes["/bomb.raw"] = image_sources.body(bomb, **{"Content-Encoding": "gzip"})
    cache = cache_for(tmp_path, max_bytes=16 * MIB)
    refused(cache, server.url("/bomb.raw"), "larger than the 16 MiB image size limit")


def test_a_slow_source_ends_at_the_deadline(tmp_path: Path, server: ScriptedServer) -> None:
    server.routes["/slow.raw"] = image_sources.drip(interval=1.0, count=600)
    cache = cache_for(tmp_path, deadline_seconds=3)
    outcome = run_limited(lambda: cache.fetch(server.url("/slow.raw")), limit=15)
    assert outcome.finished, f"still downloading after {outcome.seconds:.1f} s"
    print(f"slow source ended after {outcome.seconds:.1f} s (deadline 3 s)")
    assert outcome.error_type == "RequestError", outcome
    assert "not finished within 3 s" in outcome.error
    assert outcome.seconds < 3 + 1 + 2  # the deadline, one drip, and start-up
    assert cache_files(cache) == []


def test_http_errors_and_checksums_are_the_requests_fault(
    tmp_path: Path, server: ScriptedServer
) -> None:
    image = image_sources.qcow2(tmp_path / "a.qcow2")
    server.routes["/a.qcow2"] = image_sources.body(image.read_bytes())
    cache = cache_for(tmp_path)
    refused(cache, server.url("/missing"), "HTTP 404")
    refused(cache, server.url("/a.qcow2"), "expected " + "0" * 64, sha256="0" * 64)


def test_redirects_are_followed_only_within_http(tmp_path: Path, server: ScriptedServer) -> None:
    image = image_sources.qcow2(tmp_path / "a.qcow2")
    server.routes["/a.qcow2"] = image_sources.body(image.read_bytes())
    server.routes["/moved"] = image_sources.redirect("/a.qcow2")
    server.routes["/to-file"] = image_sources.redirect("file:///etc/shadow")
    server.routes["/loop"] = image_sources.redirect("/loop")
    cache = cache_for(tmp_path)
    refused(cache, server.url("/to-file"), "only http(s) is followed")
    refused(cache, server.url("/loop"), "more than 5 redirects")
    assert cache.fetch(server.url("/moved")).read_bytes() == image.read_bytes()


# -- qemu-img itself ------------------------------------------------------------------------


def test_qemu_img_children_die_with_their_worker(tmp_path: Path) -> None:
    """A worker killed mid-call (its job timed out) takes its limited child with it."""
    import subprocess
    import time

    import psutil

    marker = f"sleep {os.getpid() % 1000 + 1000}"

    def worker() -> None:
        subprocess.run(qemu_img.limited(marker.split(), 30), check=False)

    outcome = run_limited(worker, limit=2, kill_children=False)  # killed mid-sleep
    assert not outcome.finished

    def sleepers() -> list[psutil.Process]:
        return [p for p in psutil.process_iter(["cmdline"])
                if " ".join(p.info["cmdline"] or []) == marker]

    deadline = time.monotonic() + 5
    while sleepers() and time.monotonic() < deadline:
        time.sleep(0.1)
    assert sleepers() == []

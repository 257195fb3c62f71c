"""The image cache against a local HTTP server on 127.0.0.1 (random port)."""

from __future__ import annotations

import hashlib
import subprocess
import threading
from collections import Counter
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from http.server import BaseHTTPRequestHandler
from pathlib import Path

import pytest

from etcd_compute.errors import RequestError
from etcd_compute.virt import qemu_img
from etcd_compute.virt.images import ImageCache
from etcd_compute.virt.sources import SourcePolicy
from tests.virt.image_sources import QuietServer


class ImageServer:
    """Serves files by name from a dict and counts GETs per path."""

    def __init__(self) -> None:
        self.files: dict[str, bytes] = {}
        self.gets: Counter[str] = Counter()
        server = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:  # noqa: N802
                server.gets[self.path] += 1
                body = server.files.get(self.path)
                if body is None:
                    self.send_error(404)
                    return
                self.send_response(200)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args: object) -> None:
                pass

        self.httpd = QuietServer(("127.0.0.1", 0), Handler)
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)

    def url(self, path: str) -> str:
        return f"http://127.0.0.1:{self.httpd.server_address[1]}{path}"


@pytest.fixture
def image_server() -> Iterator[ImageServer]:
    server = ImageServer()
    server.thread.start()
    yield server
    server.httpd.shutdown()
    server.httpd.server_close()


def make_qcow2(path: Path, size: str = "64M") -> bytes:
    subprocess.run(["qemu-img", "create", "-q", "-f", "qcow2", str(path), size], check=True)
    return path.read_bytes()


def test_download_verifies_sha256_and_is_cached(image_server: ImageServer, tmp_path: Path) -> None:
    image_server.files["/a.qcow2"] = body = make_qcow2(tmp_path / "a.qcow2")
    cache = ImageCache(tmp_path / "cache", max_bytes=10**9)
    url = image_server.url("/a.qcow2")
    base = cache.fetch(url, hashlib.sha256(body).hexdigest())
    assert base.read_bytes() == body
    assert cache.fetch(url) == base
    assert image_server.gets["/a.qcow2"] == 1


def test_sha256_mismatch_is_a_request_error_and_leaves_no_file(
    image_server: ImageServer, tmp_path: Path
) -> None:
    image_server.files["/a.qcow2"] = make_qcow2(tmp_path / "a.qcow2")
    cache = ImageCache(tmp_path / "cache", max_bytes=10**9)
    wrong = "0" * 64
    with pytest.raises(RequestError, match=f"expected {wrong}"):
        cache.fetch(image_server.url("/a.qcow2"), wrong)
    assert not [p for p in (tmp_path / "cache").iterdir() if p.suffix != ".lock"]


def test_http_error_is_a_request_error(image_server: ImageServer, tmp_path: Path) -> None:
    cache = ImageCache(tmp_path / "cache", max_bytes=10**9)
    with pytest.raises(RequestError, match="HTTP 404"):
        cache.fetch(image_server.url("/missing.qcow2"))


def test_concurrent_builds_download_once(image_server: ImageServer, tmp_path: Path) -> None:
    image_server.files["/a.qcow2"] = make_qcow2(tmp_path / "a.qcow2")
    url = image_server.url("/a.qcow2")

    def fetch(_: int) -> Path:
        # One cache object per "worker", as in the compute daemon.
        return ImageCache(tmp_path / "cache", max_bytes=10**9).fetch(url)

    with ThreadPoolExecutor(5) as pool:
        bases = set(pool.map(fetch, range(5)))
    assert len(bases) == 1
    assert image_server.gets["/a.qcow2"] == 1


def test_raw_image_is_converted_to_qcow2_once(image_server: ImageServer, tmp_path: Path) -> None:
    image_server.files["/disk.raw"] = b"\0" * (1024 * 1024)
    cache = ImageCache(tmp_path / "cache", max_bytes=10**9)
    base = cache.fetch(image_server.url("/disk.raw"))
    info = qemu_img.info(base, "qcow2")
    assert info["format"] == "qcow2"
    assert info["virtual-size"] == 1024 * 1024


def test_file_url(tmp_path: Path) -> None:
    body = make_qcow2(tmp_path / "local.qcow2")
    cache = ImageCache(tmp_path / "cache", max_bytes=10**9,
                       policy=SourcePolicy(file_dirs=(str(tmp_path),)))
    assert cache.fetch(f"file://{tmp_path}/local.qcow2").read_bytes() == body
    with pytest.raises(RequestError, match="No such file"):
        cache.fetch(f"file://{tmp_path}/nothing.qcow2")


def test_eviction_removes_least_recently_used_unused_images(
    image_server: ImageServer, tmp_path: Path
) -> None:
    for name in ("a", "b", "c"):
        image_server.files[f"/{name}"] = make_qcow2(tmp_path / f"{name}.qcow2")
    in_use: set[Path] = set()
    cache = ImageCache(tmp_path / "cache", max_bytes=10**9, in_use=lambda: in_use)
    a = cache.fetch(image_server.url("/a"))
    # The base, its record and its lock as stored, with slack for the file system's
    # allocation (st_blocks of a fresh file may still change a little).
    one_image = cache.usage() + 64 * 1024
    cache.max_bytes = 2 * one_image
    b = cache.fetch(image_server.url("/b"))
    in_use.add(a)  # an overlay uses a, so b (used later, but unused) goes instead
    c = cache.fetch(image_server.url("/c"))
    assert a.exists() and c.exists() and not b.exists()

    in_use.clear()
    cache.fetch(image_server.url("/a"))  # a is now the most recently used
    cache.max_bytes = one_image
    assert cache.evict() == [c]


def test_eviction_counts_everything_in_the_cache_dir(
    image_server: ImageServer, tmp_path: Path
) -> None:
    image_server.files["/a"] = make_qcow2(tmp_path / "a.qcow2")
    cache = ImageCache(tmp_path / "cache", max_bytes=10**9)
    a = cache.fetch(image_server.url("/a"))
    cache.max_bytes = cache.usage() + 64 * 1024
    stray = cache.cache_dir / "stray.bin"  # not an image, but it takes the cap's room
    stray.write_bytes(b"x" * 1024 * 1024)
    orphan = cache.cache_dir / ("f" * 64 + ".qcow2")  # a base whose record was never written
    orphan.write_bytes(b"y" * 1024 * 1024)
    assert cache.evict() == [orphan, a]  # the orphan counts as least recently used


def test_partial_files_of_a_killed_job_are_swept(
    image_server: ImageServer, tmp_path: Path
) -> None:
    cache = ImageCache(tmp_path / "cache", max_bytes=10**9)
    holding, release = threading.Event(), threading.Event()

    def download_in_progress() -> None:  # another worker, downloading http://x/ right now
        with cache.lock("http://x/"):
            holding.set()
            release.wait(10)

    other = threading.Thread(target=download_in_progress)
    other.start()
    holding.wait(10)
    try:
        busy = cache.base_path("http://x/").with_suffix(".download")
        busy.write_bytes(b"in progress")
        left = [cache.base_path("http://y/").with_suffix(suffix)
                for suffix in (".download", ".converting")]
        for path in left:
            path.write_bytes(b"left by a killed worker")
        assert sorted(cache.sweep()) == sorted(left)
        assert busy.exists() and not any(p.exists() for p in left)
    finally:
        release.set()
        other.join()

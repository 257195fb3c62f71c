"""sources.py: what an image URL may reach and how much of it is read. file:// against tmp
dirs; http(s) through requests with a transport adapter that answers from a dict (the real
HTTP servers, slow sources and bombs are in tests/virt/test_image_attacks.py)."""

from __future__ import annotations

import gzip
import hashlib
import io
import os
import threading
import time
from pathlib import Path
from typing import Any

import pytest
import requests
import urllib3
from requests.adapters import BaseAdapter, HTTPAdapter

from etcd_compute.errors import RequestError
from etcd_compute.virt import sources
from etcd_compute.virt.sources import SourcePolicy, copy_image

MIB = 1024**2


def refused(url: str, policy: SourcePolicy, fault: str) -> None:
    """One RequestError line, exactly `fault`, and no descriptor left open."""
    descriptors = open_descriptors()
    with pytest.raises(RequestError) as caught:
        copy_image(url, policy, io.BytesIO())
    assert str(caught.value) == fault
    assert open_descriptors() == descriptors


def open_descriptors() -> set[str]:
    return set(os.listdir("/proc/self/fd"))


@pytest.fixture
def allowed(tmp_path: Path) -> Path:
    directory = tmp_path / "allowed"
    directory.mkdir()
    return directory


@pytest.mark.parametrize(("url", "scheme"), [
    ("ftp://example.org/a.img", "ftp"), ("data:,hello", "data"), ("/etc/passwd", ""),
    ("gopher://example.org/a", "gopher"),
])
def test_only_file_and_http_urls_are_read(url, scheme):
    refused(url, SourcePolicy(), f"image {url}: unsupported URL scheme {scheme!r}")


# -- file:// ------------------------------------------------------------------------------


def test_a_file_under_an_allowed_directory_is_copied_with_its_digest(allowed):
    body = os.urandom(3 * sources.CHUNK_BYTES // 2)
    (allowed / "a b.img").write_bytes(body)
    out = io.BytesIO()
    copied = copy_image(f"file://{allowed}/a%20b.img", SourcePolicy(file_dirs=(str(allowed),)),
                        out)
    assert out.getvalue() == body
    assert copied == sources.Copied(len(body), hashlib.sha256(body).hexdigest())


def test_file_urls_are_refused_when_no_directory_is_configured(allowed):
    (allowed / "a.img").write_bytes(b"x")
    url = f"file://{allowed}/a.img"
    refused(url, SourcePolicy(), f"image {url}: file:// images are not allowed on this host "
                                 "(driver.libvirt.image_file_dirs is empty)")


@pytest.mark.parametrize("suffix", ["//otherhost{d}/a.img", "//{d}/a.img?x=1",
                                    "//{d}/a.img#frag"])
def test_a_file_url_is_a_plain_absolute_path(allowed, suffix):
    (allowed / "a.img").write_bytes(b"x")
    url = "file:" + suffix.format(d=allowed)
    refused(url, SourcePolicy(file_dirs=(str(allowed),)),
            f"image {url}: a file URL is file:///absolute/path, nothing else")


def test_paths_that_lead_out_of_the_allowed_directory_are_refused_alike(allowed, tmp_path):
    (tmp_path / "secret").write_bytes(b"host secret")
    (allowed / "link.img").symlink_to(tmp_path / "secret")
    (allowed / "dirlink").symlink_to(tmp_path)
    policy = SourcePolicy(file_dirs=(str(allowed),))
    for url in (f"file://{tmp_path}/secret", f"file://{allowed}/../secret",
                f"file://{allowed}/link.img", f"file://{allowed}/dirlink/secret",
                f"file://{allowed}/a%00.img", f"file://{tmp_path}/no-such-file",
                f"file://{allowed}x/a.img"):  # a sibling whose name starts the same
        refused(url, policy, f"image {url}: not under a directory allowed for file:// images")


def test_a_symlink_inside_the_allowed_directory_is_followed(allowed):
    (allowed / "real.img").write_bytes(b"image")
    (allowed / "link.img").symlink_to(allowed / "real.img")
    out = io.BytesIO()
    copy_image(f"file://{allowed}/link.img", SourcePolicy(file_dirs=(str(allowed),)), out)
    assert out.getvalue() == b"image"


def test_what_was_opened_is_checked_not_what_the_name_meant(allowed, tmp_path, monkeypatch):
    """A symlink swapped between the check and the open leads out: refused on the descriptor."""
    (allowed / "a.img").write_bytes(b"image")
    (tmp_path / "secret").write_bytes(b"host secret")
    real_open = os.open

    def swapped(path: str, flags: int, *args: Any) -> int:
        return real_open(str(tmp_path / "secret") if path.endswith("a.img") else path, flags,
                         *args)

    monkeypatch.setattr(sources.os, "open", swapped)
    url = f"file://{allowed}/a.img"
    refused(url, SourcePolicy(file_dirs=(str(allowed),)),
            f"image {url}: not under a directory allowed for file:// images")


def test_a_missing_file_says_so_only_inside_the_allowed_directory(allowed):
    url = f"file://{allowed}/missing.img"
    refused(url, SourcePolicy(file_dirs=(str(allowed),)), f"image {url}: No such file or directory")


def test_a_directory_is_not_an_image(allowed):
    """Once an IsADirectoryError (not the request's fault) that left its descriptor open."""
    (allowed / "sub").mkdir()
    url = f"file://{allowed}/sub"
    refused(url, SourcePolicy(file_dirs=(str(allowed),)), f"image {url}: not a regular file")


def test_a_fifo_is_refused_without_waiting_for_a_writer(allowed):
    fifo = allowed / "pipe.img"
    os.mkfifo(fifo)
    url = f"file://{fifo}"
    outcome: list[BaseException] = []
    reader = threading.Thread(target=lambda: _catch(outcome, url, allowed), daemon=True)
    reader.start()
    reader.join(5)
    if reader.is_alive():  # blocked in open(): release it, then fail
        os.close(os.open(fifo, os.O_WRONLY | os.O_NONBLOCK))
        reader.join(5)
        pytest.fail("opening a FIFO waited for a writer")
    assert [str(e) for e in outcome] == [f"image {url}: not a regular file"]


def _catch(outcome: list[BaseException], url: str, allowed: Path) -> None:
    try:
        copy_image(url, SourcePolicy(file_dirs=(str(allowed),)), io.BytesIO())
    except RequestError as exc:
        outcome.append(exc)


def test_a_file_stops_at_the_size_limit(allowed):
    (allowed / "at.img").write_bytes(b"x" * MIB)
    (allowed / "over.img").write_bytes(b"x" * (MIB + 1))
    policy = SourcePolicy(file_dirs=(str(allowed),), max_bytes=MIB)
    assert copy_image(f"file://{allowed}/at.img", policy, io.BytesIO()).size == MIB
    out = io.BytesIO()
    with pytest.raises(RequestError, match=r"^image .*over.img: larger than the 1 MiB image "
                                           r"size limit$"):
        copy_image(f"file://{allowed}/over.img", policy, out)
    assert len(out.getvalue()) <= MIB


class SlowSink(io.BytesIO):
    def write(self, data: bytes) -> int:  # type: ignore[override]
        time.sleep(0.2)
        return super().write(data)


def test_one_deadline_bounds_the_whole_copy(allowed):
    (allowed / "a.img").write_bytes(b"x" * (2 * sources.CHUNK_BYTES))
    url = f"file://{allowed}/a.img"
    policy = SourcePolicy(file_dirs=(str(allowed),), deadline_seconds=0.1)
    with pytest.raises(RequestError) as caught:
        copy_image(url, policy, SlowSink())
    assert str(caught.value) == f"image {url}: download not finished within 0.1 s"


@pytest.mark.parametrize(("size", "text"), [
    (10 * 1024**3, "10 GiB"), (1024**3, "1 GiB"), (512 * MIB, "512 MiB"), (MIB + MIB // 2,
                                                                             "1.5 MiB")])
def test_sizes_in_messages(size, text):
    assert sources.size_text(size) == text


# -- http(s):// ---------------------------------------------------------------------------


class Web(BaseAdapter):
    """Answers requests from `routes[url] = (status, headers, body)`; records each send."""

    def __init__(self) -> None:
        super().__init__()
        self.routes: dict[str, tuple[int, dict[str, str], bytes]] = {}
        self.sent: list[tuple[str, Any]] = []
        self.fail: Exception | None = None

    def send(self, request: requests.PreparedRequest, stream: bool = False,
             timeout: Any = None, **_kwargs: Any) -> requests.Response:
        self.sent.append((request.url, timeout))
        if self.fail:
            raise self.fail
        status, headers, body = self.routes.get(request.url, (404, {}, b""))
        raw = urllib3.HTTPResponse(body=io.BytesIO(body), headers=headers, status=status,
                                   preload_content=False, decode_content=False,
                                   request_url=request.url)
        return HTTPAdapter().build_response(request, raw)

    def close(self) -> None:
        pass


@pytest.fixture
def web(monkeypatch: pytest.MonkeyPatch) -> Web:
    adapter = Web()

    class Session(requests.Session):
        def __init__(self) -> None:
            super().__init__()
            self.mount("http://", adapter)
            self.mount("https://", adapter)

    monkeypatch.setattr(sources.requests, "Session", Session)
    return adapter


def test_an_image_over_http_is_copied_with_its_digest(web):
    body = os.urandom(100_000)
    web.routes["https://images.example/a.img"] = (200, {"Content-Length": "100000"}, body)
    out = io.BytesIO()
    copied = copy_image("https://images.example/a.img", SourcePolicy(), out)
    assert (out.getvalue(), copied.sha256) == (body, hashlib.sha256(body).hexdigest())
    # Each request bounded by the connect and read timeouts, and never past the deadline.
    assert web.sent == [("https://images.example/a.img", (10.0, 60.0))]
    copy_image("https://images.example/a.img", SourcePolicy(deadline_seconds=5), io.BytesIO())
    connect, read = web.sent[-1][1]
    assert 4 < connect <= 5 and 4 < read <= 5


def test_redirects_are_followed_within_http_up_to_the_limit(web):
    web.routes["http://a.example/img"] = (200, {}, b"image")
    for hop in range(5):  # /0 -> /1 -> ... -> /4 -> /img: five redirects, the last relative
        target = f"/{hop + 1}" if hop < 4 else "/img"
        web.routes[f"http://a.example/{hop}"] = (302, {"Location": target}, b"")
    out = io.BytesIO()
    copy_image("http://a.example/0", SourcePolicy(), out)
    assert out.getvalue() == b"image"
    refused("http://a.example/0", SourcePolicy(max_redirects=4),
            "image http://a.example/0: more than 4 redirects")


@pytest.mark.parametrize(("start", "location", "fault"), [
    ("http://a.example/x", "file:///etc/shadow",
     "redirected to a file URL, only http(s) is followed"),
    ("http://a.example/x", "ftp://a.example/img",
     "redirected to a ftp URL, only http(s) is followed"),
    ("https://a.example/x", "http://a.example/img",
     "redirected from https to http (a downgrade), refused"),
])
def test_a_redirect_out_of_http_or_down_to_http_is_refused(web, start, location, fault):
    web.routes[start] = (301, {"Location": location}, b"")
    web.routes[location] = (200, {}, b"must not be read")
    refused(start, SourcePolicy(), f"image {start}: {fault}")
    assert [url for url, _ in web.sent] == [start]


def test_an_http_error_is_the_requests_fault(web):
    refused("http://a.example/missing", SourcePolicy(), "image http://a.example/missing: HTTP 404")
    web.routes["http://a.example/x"] = (500, {}, b"oops")
    refused("http://a.example/x", SourcePolicy(), "image http://a.example/x: HTTP 500")


def test_a_declared_length_over_the_limit_is_refused_before_reading(web):
    web.routes["http://a.example/x"] = (200, {"Content-Length": str(MIB + 1)}, b"")
    refused("http://a.example/x", SourcePolicy(max_bytes=MIB),
            f"image http://a.example/x: {MIB + 1} bytes, larger than the 1 MiB image size limit")


def test_a_body_longer_than_declared_or_than_the_limit_stops_at_the_limit(web):
    web.routes["http://a.example/x"] = (200, {}, b"x" * (2 * MIB))
    out = io.BytesIO()
    with pytest.raises(RequestError, match="^image http://a.example/x: larger than the 1 MiB "
                                           "image size limit$"):
        copy_image("http://a.example/x", SourcePolicy(max_bytes=MIB), out)
    assert len(out.getvalue()) <= MIB


def test_decoded_bytes_count_a_gzip_bomb_stops_at_the_limit(web):
    bomb = gzip.compress(b"\0" * (16 * MIB))
    assert len(bomb) < 64 * 1024
    web.routes["http://a.example/x"] = (200, {"Content-Encoding": "gzip"}, bomb)
    out = io.BytesIO()
    with pytest.raises(RequestError, match="^image http://a.example/x: larger than the 1 MiB "
                                           "image size limit$"):
        copy_image("http://a.example/x", SourcePolicy(max_bytes=MIB), out)
    assert len(out.getvalue()) <= MIB


def test_wire_bytes_count_too(web):
    """Random data grows when gzipped: decoded it fits the limit, on the wire it does not."""
    data = os.urandom(100 * 1024)
    wire = gzip.compress(data)
    assert len(wire) > len(data)
    web.routes["http://a.example/x"] = (200, {"Content-Encoding": "gzip"}, wire)
    policy = SourcePolicy(max_bytes=len(data))
    refused("http://a.example/x", policy,
            f"image http://a.example/x: larger than the {sources.size_text(len(data))} image "
            "size limit")


def test_a_connection_failure_is_one_line(web):
    web.fail = requests.ConnectionError("Max retries exceeded with url: /x (Caused by ...)")
    refused("http://a.example/x", SourcePolicy(),
            "image http://a.example/x: download failed: ConnectionError")


def test_a_spent_deadline_sends_no_request(web):
    refused("http://a.example/x", SourcePolicy(deadline_seconds=0),
            "image http://a.example/x: download not finished within 0 s")
    assert web.sent == []


# -- an image in Glance ---------------------------------------------------------------------

GLANCE = "https://glance.invalid:9292"
GLANCE_ID = "6f1c1a52-3d4e-4c3b-9a55-2b0c6d8e9f10"


class GlanceBytes:
    """Stands in for this host's GlanceClient: `download` answers with `body` streamed."""

    def __init__(self, body: bytes, endpoint: str = GLANCE,
                 fault: Exception | None = None):
        self.body, self.endpoint, self.fault = body, endpoint, fault
        self.downloads: list[str] = []
        self.closed = False

    def download(self, image_id: str, timeout: Any = None) -> requests.Response:
        self.downloads.append(image_id)
        if self.fault is not None:
            raise self.fault
        response = requests.Response()
        response.status_code = 200
        response.raw = urllib3.HTTPResponse(io.BytesIO(self.body), preload_content=False)
        return response


def glance_source(body: bytes, **changes: Any) -> sources.GlanceSource:
    fields = {"image_id": GLANCE_ID, "sha512": hashlib.sha512(body).hexdigest(),
              "size": len(body), "endpoint": GLANCE, **changes}
    return sources.GlanceSource(**fields)


def glance_refused(source: sources.GlanceSource, glance: GlanceBytes, fault: str,
                   policy: SourcePolicy | None = None,
                   error: type[Exception] = RequestError) -> io.BytesIO:
    out = io.BytesIO()
    with pytest.raises(error) as caught:
        sources.copy_glance_image(source, lambda: glance, policy or SourcePolicy(), out)
    assert str(caught.value) == fault
    return out


def test_an_image_in_glance_is_copied_with_its_size_and_sha512_checked():
    body = os.urandom(3 * sources.CHUNK_BYTES // 2)
    out = io.BytesIO()
    glance = GlanceBytes(body)
    copied = sources.copy_glance_image(glance_source(body), lambda: glance, SourcePolicy(), out)
    assert out.getvalue() == body and glance.downloads == [GLANCE_ID]
    assert copied == sources.Copied(len(body), hashlib.sha256(body).hexdigest())


def test_bytes_changed_behind_glances_back_are_refused():
    body = b"A" * 4096
    glance_refused(glance_source(body), GlanceBytes(b"B" * 4096),
                   f"image {GLANCE_ID} (Glance): sha512 of the bytes does not match Glance's "
                   "os_hash_value (changed behind Glance's back?)")


def test_more_bytes_than_glance_recorded_stop_at_once_fewer_are_refused():
    out = glance_refused(glance_source(b"x" * 100), GlanceBytes(b"x" * (5 * MIB)),
                         f"image {GLANCE_ID} (Glance): more bytes than the 100 Glance "
                         "recorded for it")
    assert len(out.getvalue()) == 0  # the first chunk already over: nothing kept
    glance_refused(glance_source(b"x" * 100), GlanceBytes(b"x" * 60),
                   f"image {GLANCE_ID} (Glance): 60 bytes, but Glance recorded 100")


def test_an_image_over_the_size_limit_is_refused_before_downloading():
    glance = GlanceBytes(b"")
    glance_refused(glance_source(b"", size=64 * MIB), glance,
                   f"image {GLANCE_ID} (Glance): {64 * MIB} bytes, larger than the 16 MiB "
                   "image size limit", SourcePolicy(max_bytes=16 * MIB))
    assert glance.downloads == []


def test_our_credential_goes_to_this_hosts_glance_only():
    glance = GlanceBytes(b"x")
    glance_refused(glance_source(b"x", endpoint="https://evil.invalid"), glance,
                   f"image {GLANCE_ID} (Glance): from the Glance at https://evil.invalid, not "
                   f"this host's ({GLANCE}); our credential goes to ours only")
    assert glance.downloads == []


def test_an_image_gone_from_glance_is_the_requests_fault_glance_down_the_hosts():
    from etcd_compute.errors import BuildError, ConfigError, GlanceUnavailable, NotFound

    glance_refused(glance_source(b"x"), GlanceBytes(b"", fault=NotFound("gone")),
                   f"image {GLANCE_ID} (Glance): no longer in Glance")
    glance_refused(glance_source(b"x"), GlanceBytes(b"", fault=GlanceUnavailable("Glance: 503")),
                   f"image {GLANCE_ID} (Glance): Glance: 503", error=BuildError)

    def unconfigured() -> Any:
        raise ConfigError("glance.keystone is not set")

    with pytest.raises(BuildError, match="this host cannot reach Glance: glance.keystone"):
        sources.copy_glance_image(glance_source(b"x"), unconfigured, SourcePolicy(),
                                  io.BytesIO())


def test_a_glance_stream_that_ends_before_its_recorded_size_is_the_requests_fault():
    body = b"x" * 1000

    class Short(GlanceBytes):
        def download(self, image_id: str, timeout: Any = None) -> requests.Response:
            response = super().download(image_id, timeout)
            response.raw = urllib3.HTTPResponse(io.BytesIO(body[:400]), preload_content=False,
                                                headers={"content-length": "1000"})
            return response

    glance_refused(glance_source(body), Short(body),
                   f"image {GLANCE_ID} (Glance): the download ended after 400 of the 1000 "
                   "bytes Glance recorded")

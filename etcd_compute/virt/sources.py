"""Where image bytes come from, and the limits on reading them.

An image URL is a request's, so untrusted. `copy_image` streams it into an
open file under a `SourcePolicy`:

- `file://` only for regular files under the configured directories
  (`driver.libvirt.image_file_dirs`, empty by default: no host file is an
  image unless the operator says so). The path is resolved first (symlinks,
  `..`) and checked again on the opened descriptor, so a swapped symlink
  cannot lead out; whether a file outside exists is never told.
- `http(s)://` with redirects followed by hand: at most `max_redirects`,
  only to http(s), never from https down to http.
- At most `max_bytes`, counted on the wire and after requests' transparent
  gzip/deflate decoding (a small gzip bomb stops at the cap, and urllib3
  decodes a read into at most the bytes asked for), and an overall deadline:
  a source that sends a byte a minute fails at the deadline (at worst one
  read timeout later), not at the job timeout.
- An image in Glance (`copy_glance_image`): `/v2/images/<id>/file` from this host's own
  Glance (the spec's endpoint must be it: our token goes nowhere else) with this host's
  service credential, within the same size cap and deadline, and never more bytes than
  Glance's recorded size; size and sha512 (Glance's `os_hash_value`) are checked against
  what the spec carries as the bytes stream by.

Every failure here is the request's (RequestError with one line), but for Glance being
unreachable or refusing this host's credential: the host's (BuildError), so the build is
tried elsewhere.
"""

from __future__ import annotations

import hashlib
import os
import stat
import time
import urllib.parse
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO

import requests
import urllib3.exceptions

from etcd_compute.errors import (
    BuildError,
    ConfigError,
    EtcdComputeError,
    GlanceError,
    GlanceUnavailable,
    NotFound,
    RequestError,
)

GIB = 1024**3
CHUNK_BYTES = 1024 * 1024
CONNECT_TIMEOUT_SECONDS = 10.0
# Longest wait for any one read; the deadline bounds the whole download.
READ_TIMEOUT_SECONDS = 60.0
SCHEMES = ("file", "http", "https")


@dataclass(frozen=True)
class SourcePolicy:
    """What an image URL may reach and how much of it is read."""

    file_dirs: tuple[str, ...] = ()
    max_bytes: int = 10 * GIB
    deadline_seconds: float = 600.0
    max_redirects: int = 5


@dataclass(frozen=True)
class Copied:
    """What `copy_image` wrote: byte count (decoded) and its sha256."""

    size: int
    sha256: str


def copy_image(url: str, policy: SourcePolicy, out: BinaryIO) -> Copied:
    """Write the bytes behind `url` to `out` within `policy`; RequestError on any fault."""
    deadline = time.monotonic() + policy.deadline_seconds
    scheme = urllib.parse.urlsplit(url).scheme
    if scheme not in SCHEMES:
        raise RequestError(f"image {url}: unsupported URL scheme {scheme!r}")
    chunks = _file_chunks(url, policy) if scheme == "file" else _http_chunks(url, policy, deadline)
    digest = hashlib.sha256()
    size = 0
    try:
        for chunk in chunks:
            size += len(chunk)
            if size > policy.max_bytes:
                raise RequestError(f"image {url}: larger than the "
                                   f"{size_text(policy.max_bytes)} image size limit")
            if time.monotonic() > deadline:
                raise _too_slow(url, policy)
            out.write(chunk)
            digest.update(chunk)
    finally:
        chunks.close()
    return Copied(size, digest.hexdigest())


@dataclass(frozen=True)
class GlanceSource:
    """An image in Glance, as a spec names it (`image.glance`)."""

    image_id: str
    sha512: str
    size: int
    endpoint: str

    @classmethod
    def of(cls, glance: dict[str, Any]) -> GlanceSource:
        return cls(glance["id"], glance["sha512"], glance["size"], glance["endpoint"])

    @property
    def label(self) -> str:
        return f"image {self.image_id} (Glance)"


def copy_glance_image(source: GlanceSource, client: Callable[[], Any], policy: SourcePolicy,
                      out: BinaryIO) -> Copied:
    """Write the bytes of `source` to `out`, downloaded with `client()` (this host's
    GlanceClient), within `policy`; check size and sha512 while streaming."""
    deadline = time.monotonic() + policy.deadline_seconds
    label = source.label
    if source.size > policy.max_bytes:
        raise RequestError(f"{label}: {source.size} bytes, larger than the "
                           f"{size_text(policy.max_bytes)} image size limit")
    try:
        glance = client()
        ours = glance.endpoint.rstrip("/")
    except ConfigError as exc:
        raise BuildError(f"{label}: this host cannot reach Glance: {exc}") from None
    except GlanceUnavailable as exc:
        raise BuildError(f"{label}: {exc}") from None
    if source.endpoint.rstrip("/") != ours:
        raise RequestError(f"{label}: from the Glance at {source.endpoint[:200]}, not this "
                           f"host's ({ours}); our credential goes to ours only")
    try:
        response = glance.download(source.image_id, timeout=(
            min(CONNECT_TIMEOUT_SECONDS, policy.deadline_seconds),
            min(READ_TIMEOUT_SECONDS, policy.deadline_seconds)))
    except NotFound:
        raise RequestError(f"{label}: no longer in Glance") from None
    except GlanceUnavailable as exc:
        raise BuildError(f"{label}: {exc}") from None
    except (GlanceError, EtcdComputeError) as exc:
        raise RequestError(f"{label}: {exc}") from None
    sha512, sha256 = hashlib.sha512(), hashlib.sha256()
    size = 0
    raw = response.raw
    try:
        while True:
            if time.monotonic() > deadline:
                raise _too_slow(label, policy)
            chunk = raw.read1(CHUNK_BYTES, decode_content=True)
            if not chunk:
                break
            size += len(chunk)
            if size > source.size:
                raise RequestError(f"{label}: more bytes than the {source.size} Glance "
                                   "recorded for it")
            if raw.tell() > policy.max_bytes:
                raise RequestError(f"{label}: larger than the {size_text(policy.max_bytes)} "
                                   "image size limit")
            out.write(chunk)
            sha512.update(chunk)
            sha256.update(chunk)
    except (requests.RequestException, urllib3.exceptions.HTTPError, OSError) as exc:
        if "IncompleteRead" in repr(exc):
            # Glance closed the stream before the size it recorded (its Content-Length):
            # it has fewer bytes than it says, wherever we ask.
            raise RequestError(f"{label}: the download ended after {size} of the "
                               f"{source.size} bytes Glance recorded") from None
        raise BuildError(f"{label}: download failed: {type(exc).__name__}") from None
    finally:
        response.close()
    if size != source.size:
        raise RequestError(f"{label}: {size} bytes, but Glance recorded {source.size}")
    if sha512.hexdigest() != source.sha512:
        raise RequestError(f"{label}: sha512 of the bytes does not match Glance's "
                           "os_hash_value (changed behind Glance's back?)")
    return Copied(size, sha256.hexdigest())


def size_text(size: int) -> str:
    """`size` bytes in GiB, or MiB below one GiB."""
    return f"{size / GIB:g} GiB" if size >= GIB else f"{size / 1024**2:g} MiB"


def _too_slow(url: str, policy: SourcePolicy) -> RequestError:
    return RequestError(f"image {url}: download not finished within "
                        f"{policy.deadline_seconds:g} s")


# -- file:// --------------------------------------------------------------------------


def allowed_file(path: str, file_dirs: tuple[str, ...]) -> bool:
    """`path`, resolved, is inside one of `file_dirs` (resolved too)."""
    resolved = Path(os.path.realpath(path))
    return any(resolved.is_relative_to(os.path.realpath(d)) for d in file_dirs)


def _file_chunks(url: str, policy: SourcePolicy) -> Iterator[bytes]:
    parsed = urllib.parse.urlsplit(url)
    if parsed.netloc not in ("", "localhost") or parsed.query or parsed.fragment:
        raise RequestError(f"image {url}: a file URL is file:///absolute/path, nothing else")
    path = urllib.parse.unquote(parsed.path)
    if not policy.file_dirs:
        raise RequestError(f"image {url}: file:// images are not allowed on this host "
                           "(driver.libvirt.image_file_dirs is empty)")
    if "\0" in path or not allowed_file(path, policy.file_dirs):
        raise RequestError(f"image {url}: not under a directory allowed for file:// images")
    try:
        # O_NONBLOCK: opening a FIFO must not wait for a writer.
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC)
    except OSError as exc:
        raise RequestError(f"image {url}: {exc.strerror}") from None
    # What was opened, not what the name meant a moment ago (a swapped symlink); checked on
    # the descriptor, before it becomes a file object (a directory cannot become one).
    fault = None
    if not allowed_file(os.readlink(f"/proc/self/fd/{fd}"), policy.file_dirs):
        fault = "not under a directory allowed for file:// images"
    elif not stat.S_ISREG(os.fstat(fd).st_mode):
        fault = "not a regular file"
    if fault:
        os.close(fd)
        raise RequestError(f"image {url}: {fault}")
    return _read_file(os.fdopen(fd, "rb"))


def _read_file(handle: BinaryIO) -> Iterator[bytes]:
    with handle:
        while chunk := handle.read(CHUNK_BYTES):
            yield chunk


# -- http(s):// -----------------------------------------------------------------------


def check_redirect(current: str, target: str) -> None:
    """RequestError unless following a redirect from `current` to `target` is allowed."""
    scheme = urllib.parse.urlsplit(target).scheme
    if scheme not in ("http", "https"):
        raise RequestError(f"image {current}: redirected to a {scheme or 'relative'!s} URL, "
                           "only http(s) is followed")
    if urllib.parse.urlsplit(current).scheme == "https" and scheme == "http":
        raise RequestError(f"image {current}: redirected from https to http (a downgrade), "
                           "refused")


def _get(session: requests.Session, url: str, original: str, policy: SourcePolicy,
         deadline: float) -> requests.Response:
    remaining = deadline - time.monotonic()
    if remaining <= 0:
        raise _too_slow(original, policy)
    try:
        return session.get(url, stream=True, allow_redirects=False,
                           timeout=(min(CONNECT_TIMEOUT_SECONDS, remaining),
                                    min(READ_TIMEOUT_SECONDS, remaining)))
    except requests.RequestException as exc:
        raise RequestError(f"image {original}: download failed: {type(exc).__name__}") from None


def _open_http(url: str, policy: SourcePolicy, deadline: float) -> requests.Response:
    session = requests.Session()
    current = url
    for _ in range(policy.max_redirects + 1):
        response = _get(session, current, url, policy, deadline)
        if not response.is_redirect:
            break
        target = urllib.parse.urljoin(current, response.headers["Location"])
        response.close()
        check_redirect(current, target)
        current = target
    else:
        raise RequestError(f"image {url}: more than {policy.max_redirects} redirects")
    if response.status_code != 200:
        response.close()
        raise RequestError(f"image {url}: HTTP {response.status_code}")
    length = response.headers.get("Content-Length", "")
    if length.isdigit() and int(length) > policy.max_bytes:
        response.close()
        raise RequestError(f"image {url}: {int(length)} bytes, larger than the "
                           f"{size_text(policy.max_bytes)} image size limit")
    return response


def _http_chunks(url: str, policy: SourcePolicy, deadline: float) -> Iterator[bytes]:
    response = _open_http(url, policy, deadline)
    raw = response.raw
    try:
        while True:
            if time.monotonic() > deadline:
                raise _too_slow(url, policy)
            # read1: whatever has arrived (a drip cannot hold one call for long);
            # decoded (gzip/deflate) into at most CHUNK_BYTES.
            chunk = raw.read1(CHUNK_BYTES, decode_content=True)
            if not chunk:
                return
            if raw.tell() > policy.max_bytes:  # bytes on the wire, before decoding
                raise RequestError(f"image {url}: larger than the "
                                   f"{size_text(policy.max_bytes)} image size limit")
            yield chunk
    except (requests.RequestException, urllib3.exceptions.HTTPError, OSError) as exc:
        raise RequestError(f"image {url}: download failed: {type(exc).__name__}") from None
    finally:
        response.close()

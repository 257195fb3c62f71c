"""Hostile image sources for the image tests: an HTTP server on 127.0.0.1 (random port)
whose paths answer with whatever a test scripts, and crafted image files."""

from __future__ import annotations

import multiprocessing
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import psutil

Route = Callable[[BaseHTTPRequestHandler], None]


class QuietServer(ThreadingHTTPServer):
    """A client hanging up (our download stopped at a limit) is not worth a traceback."""

    daemon_threads = True

    def handle_error(self, request: object, client_address: object) -> None:
        if not isinstance(sys.exc_info()[1], ConnectionError):
            super().handle_error(request, client_address)  # type: ignore[arg-type]


class ScriptedServer:
    """`routes[path](handler)` answers a GET; unknown paths get 404."""

    def __init__(self) -> None:
        self.routes: dict[str, Route] = {}
        server = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def do_GET(self) -> None:  # noqa: N802
                route = server.routes.get(self.path)
                if route is None:
                    self.send_error(404)
                    return
                try:
                    route(self)
                except (BrokenPipeError, ConnectionResetError):
                    pass  # the client gave up, as it should

            def log_message(self, *args: object) -> None:
                pass

        self.httpd = QuietServer(("127.0.0.1", 0), Handler)
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)
        self.thread.start()

    def url(self, path: str) -> str:
        return f"http://127.0.0.1:{self.httpd.server_address[1]}{path}"

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


def body(data: bytes, **headers: str) -> Route:
    """Answer 200 with `data` and `headers`."""
    def answer(handler: BaseHTTPRequestHandler) -> None:
        handler.send_response(200)
        for name, value in {"Content-Length": str(len(data)), **headers}.items():
            handler.send_header(name, value)
        handler.end_headers()
        handler.wfile.write(data)
    return answer


def drip(interval: float, count: int = 1000) -> Route:
    """Answer 200 and then send one byte every `interval` seconds."""
    def answer(handler: BaseHTTPRequestHandler) -> None:
        handler.send_response(200)
        handler.send_header("Content-Length", str(count))
        handler.end_headers()
        for _ in range(count):
            handler.wfile.write(b"x")
            handler.wfile.flush()
            time.sleep(interval)
    return answer


def redirect(location: str) -> Route:
    def answer(handler: BaseHTTPRequestHandler) -> None:
        handler.send_response(302)
        handler.send_header("Location", location)
        handler.send_header("Content-Length", "0")
        handler.end_headers()
    return answer


# -- crafted images ------------------------------------------------------------------------


def qcow2(path: Path, size: str = "64M", *options: str) -> Path:
    subprocess.run(["qemu-img", "create", "-q", "-f", "qcow2", *options, str(path), size],
                   check=True)
    return path


def vmdk_descriptor(extent: str) -> bytes:
    """A text-only VMDK descriptor (monolithicFlat) whose one extent is `extent`."""
    return (
        "# Disk DescriptorFile\nversion=1\nCID=fffffffe\nparentCID=ffffffff\n"
        'createType="monolithicFlat"\n\n'
        f'RW 1 FLAT "{extent}" 0\n\n'
        'ddb.virtualHWVersion = "4"\nddb.geometry.cylinders = "1"\n'
        'ddb.geometry.heads = "16"\nddb.geometry.sectors = "63"\nddb.adapterType = "ide"\n'
    ).encode()


def qcow2_with_data_file(directory: Path, data_file: Path) -> Path:
    """A qcow2 whose clusters live in `data_file`, a file of the host (data_file_raw)."""
    return qcow2(directory / "data-file.qcow2", "1M", "-o",
                 f"data_file={data_file},data_file_raw=on")


def converted(directory: Path, image_format: str) -> Path:
    """A small image in `image_format` (vpc, vdi, ...) made by qemu-img."""
    raw = directory / "source.raw"
    raw.write_bytes(b"\1" * 1024 * 1024)
    target = directory / f"image.{image_format}"
    subprocess.run(["qemu-img", "convert", "-q", "-f", "raw", "-O", image_format, str(raw),
                    str(target)], check=True)
    return target


# -- running a call with a wall-clock limit --------------------------------------------------


@dataclass
class Outcome:
    seconds: float
    finished: bool
    error: str | None = None
    error_type: str | None = None


def _child(function: Callable[[], Any], pipe: Any) -> None:
    try:
        function()
        pipe.send((None, None))
    except BaseException as exc:  # noqa: BLE001 (reported to the parent)
        pipe.send((type(exc).__name__, str(exc)))


def run_limited(function: Callable[[], Any], limit: float, kill_children: bool = True) -> Outcome:
    """`function()` in a forked child, killed (with its children unless told not to) after
    `limit` seconds."""
    context = multiprocessing.get_context("fork")
    receiver, sender = context.Pipe(duplex=False)
    process = context.Process(target=_child, args=(function, sender))
    started = time.monotonic()
    process.start()
    finished = receiver.poll(limit)
    seconds = time.monotonic() - started
    if not finished:
        children = psutil.Process(process.pid).children(recursive=True) if kill_children else []
        for child in children:
            child.kill()
        process.kill()
        process.join()
        return Outcome(seconds, False)
    error_type, error = receiver.recv()
    process.join()
    return Outcome(seconds, True, error, error_type)


def leftover_children() -> Iterator[psutil.Process]:
    """Our children that are qemu-img (none may outlive the call that started it)."""
    for child in psutil.Process().children(recursive=True):
        try:
            if "qemu-img" in " ".join(child.cmdline()):
                yield child
        except psutil.Error:
            continue

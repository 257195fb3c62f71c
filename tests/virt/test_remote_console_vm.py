"""A guest's screen in a browser's websocket: `schedule.py console UUID --url` -> the real
console proxy (`schedule.py console-proxy`: websockify and noVNC) -> the compute's console
relay (mutual TLS, inside the hypervisor host's network namespace) -> libvirt's VNC unix
socket of a real TCG guest, whose first words are RFB's "RFB 003.008".

And what the proxy and the relay refuse: a token used twice, an expired one, one for a
server since deleted, a forged or garbage one, a path that names a host or a port, a
browser's Origin from elsewhere; a relay connection without the proxy's certificate.

No fixed name of the machine: the guest's host is a network namespace of its own
(tools/local_services/hypervisors.py), the proxy and the relay listen on free ports, so
these tests join no group of WORKER_GROUPS and run on any worker.
"""

from __future__ import annotations

import base64
import os
import socket
import ssl
import struct
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib import parse

import pytest
import requests

from etcd_compute import remote_consoles
from etcd_compute.pki import CONSOLE_PROXY, CONSOLE_RELAY, OPERATOR, Pki
from tests.compute.helpers import wait_state
from tests.support import REPO, wait_for
from tests.virt.hypervisors import ComputeHosts, hypervisors
from tools.local_services import stop_pid
from tools.local_services.process import free_port

pytestmark = pytest.mark.vm

RFB = b"RFB 003.008\n"


class Proxy:
    """`schedule.py console-proxy` on a free loopback port, stopped by pid."""

    def __init__(self, config_path: Path, port: int, log: Path):
        self.port, self.log = port, log
        with open(log, "ab") as out:
            self.process = subprocess.Popen(
                [sys.executable, str(REPO / "schedule.py"), "--config", str(config_path),
                 "console-proxy"], cwd=REPO, stdout=out, stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL, start_new_session=True)
        wait_for(self._serving, 30, what="the console proxy")

    def _serving(self) -> bool:
        assert self.process.poll() is None, self.log.read_text(errors="replace")
        try:
            return requests.get(f"http://127.0.0.1:{self.port}/vnc_lite.html",
                                timeout=2).status_code == 200
        except requests.ConnectionError:
            return False

    def open(self, path: str, origin: str | None = None,
             cookie: str | None = None) -> socket.socket:
        """A websocket to `path` (a socket past the handshake), or WebSocketDenied with the
        proxy's status line."""
        return websocket(self.port, path, origin, cookie)

    def refused(self, path: str, origin: str | None = None) -> str:
        with pytest.raises(WebSocketDenied) as refusal:
            self.open(path, origin).close()
        return str(refusal.value)

    def stop(self) -> None:
        stop_pid(self.process.pid)


class WebSocketDenied(Exception):
    """The proxy answered the upgrade with an HTTP error (its status line)."""


def websocket(port: int, path: str, origin: str | None = None,
              cookie: str | None = None) -> socket.socket:
    """A client's websocket handshake (RFC 6455) for `path` exactly as given, query and all
    (websockify's client drops the query: tokens travel in it)."""
    sock = socket.create_connection(("127.0.0.1", port), timeout=30)
    key = base64.b64encode(os.urandom(16)).decode()
    headers = [f"GET {path} HTTP/1.1", f"Host: 127.0.0.1:{port}", "Upgrade: websocket",
               "Connection: Upgrade", f"Sec-WebSocket-Key: {key}",
               "Sec-WebSocket-Version: 13", "Sec-WebSocket-Protocol: binary"]
    headers += [f"Origin: {origin}"] if origin else []
    headers += [f"Cookie: {cookie}"] if cookie else []
    sock.sendall(("\r\n".join(headers) + "\r\n\r\n").encode())
    answer = b""
    while b"\r\n\r\n" not in answer:
        chunk = sock.recv(1)
        if not chunk:
            break
        answer += chunk
    status = answer.split(b"\r\n", 1)[0].decode("latin-1")
    if " 101 " not in status + " ":
        sock.close()
        raise WebSocketDenied(status)
    return sock


def first_words(sock: socket.socket, timeout: float = 30) -> bytes:
    """What the guest's VNC server says first: the payloads of the websocket's first
    frames (a server's frames are not masked)."""
    sock.settimeout(timeout)

    def exactly(count: int) -> bytes:
        data = b""
        while len(data) < count:
            chunk = sock.recv(count - len(data))
            if not chunk:
                raise ConnectionError(f"closed after {data!r}")
            data += chunk
        return data

    data = b""
    while len(data) < len(RFB):
        opcode, length = exactly(2)
        length &= 0x7F
        if length == 126:
            length = struct.unpack("!H", exactly(2))[0]
        elif length == 127:
            length = struct.unpack("!Q", exactly(8))[0]
        payload = exactly(length)
        if opcode & 0x0F == 0x8:
            raise ConnectionError(f"closed by the proxy: {payload!r}")
        data += payload
    return data


def token_in(url: str) -> str:
    path = parse.parse_qs(parse.urlsplit(url).query)["path"][0]
    return parse.parse_qs(parse.urlsplit(path).query)["token"][0]


@pytest.fixture
def console_world(placement, store, host_config, write_yaml, tmp_path: Path,
                  schedule_config: dict[str, Any], cluster_pki: Pki,
                  test_guest_image: Path, run_schedule) -> Iterator[dict[str, Any]]:
    """One hypervisor host with a console relay, a real guest ACTIVE on it, the console
    proxy beside the operator's schedule.yaml."""
    with hypervisors(["a"]) as hosts:
        host = hosts["a"]
        computes = ComputeHosts(hosts, host_config, write_yaml, tmp_path)
        relay = cluster_pki.issue(f"console-relay-{host.name}-{tmp_path.name}"[:60],
                                  CONSOLE_RELAY, ips=[host.address])
        computes.configs["a"]["console"] = {
            "listen": f"{host.address}:{free_port()}", "cert": str(relay.cert),
            "key": str(relay.key), "ca_cert": str(cluster_pki.ca_cert)}
        proxy_cert = cluster_pki.issue("console-proxy-tests", CONSOLE_PROXY)
        port = free_port()
        config = {**schedule_config, "console": {
            **schedule_config["console"], "proxy_listen": f"127.0.0.1:{port}",
            "base_url": f"http://127.0.0.1:{port}/vnc_lite.html",
            "cert": str(proxy_cert.cert), "key": str(proxy_cert.key),
            "ca_cert": str(cluster_pki.ca_cert)}}
        config_path = write_yaml("console.yaml", config)
        proxy = None
        try:
            computes.start("a")
            rp = computes.rp("a")
            wait_for(lambda: store.get(store.keys.alive(rp)), 60, what="compute heartbeat")
            placed = run_schedule("resources=VCPU:1,MEMORY_MB:128,DISK_GB:1", "--image",
                                  f"file://{test_guest_image}", timeout=120)
            assert placed.code == 0, placed.stderr
            uuid = placed.stdout.split()[-1]
            wait_state(store, uuid, "ACTIVE", timeout=240)
            proxy = Proxy(config_path, port, tmp_path / "console-proxy.log")
            yield {"uuid": uuid, "proxy": proxy, "config": config_path, "host": host,
                   "relay": computes.configs["a"]["console"]["listen"], "pki": cluster_pki}
        finally:
            if proxy is not None:
                proxy.stop()
            computes.close()


def url_of(run_schedule, world: dict[str, Any]) -> str:
    got = run_schedule("console", world["uuid"], "--url", config=world["config"])
    assert got.code == 0, got.stderr
    return got.stdout.strip()


def test_a_token_opens_the_guests_screen_once_and_nothing_else(
        console_world: dict[str, Any], run_schedule, store) -> None:
    proxy, uuid = console_world["proxy"], console_world["uuid"]
    url = url_of(run_schedule, console_world)
    assert url.startswith(f"http://127.0.0.1:{proxy.port}/vnc_lite.html?path=%3Ftoken%3D")
    token = token_in(url)
    # noVNC's page is served by the proxy.
    page = requests.get(url, timeout=10)
    assert page.status_code == 200 and "noVNC" in page.text

    # A path naming a target is refused before the token is looked at (still unused).
    for path in (f"/?token={token}&host=10.0.0.1&port=5900",
                 f"/10.0.0.1:5900?token={token}", f"/?token={token}&target=10.0.0.1:5900"):
        assert " 400 " in proxy.refused(path), path
    # A browser page from another origin may not use it either (also before the token).
    assert "Origin header does not match" in proxy.refused(
        f"/?token={token}", origin="http://evil.example")

    ws = proxy.open(f"/?token={token}", origin=f"http://127.0.0.1:{proxy.port}")
    try:
        assert first_words(ws) == RFB
    finally:
        ws.close()
    # Used: refused the second time.
    assert "already used" in proxy.refused(f"/?token={token}")

    # Garbage, and a well-formed token nobody issued.
    assert "malformed" in proxy.refused("/?token=garbage%00%0a")
    assert "invalid, expired or already used" in proxy.refused(f"/?token={'A' * 43}")
    assert "no console token" in proxy.refused("/")

    # Expired: issued with a short life, used after it.
    short = remote_consoles.issue(store, uuid, 2, "test")
    time.sleep(3.5)
    assert "expired" in proxy.refused(f"/?token={short}")

    # noVNC's cookie convention carries a token too.
    ws = proxy.open("/", cookie=f"token={token_in(url_of(run_schedule, console_world))}")
    try:
        assert first_words(ws) == RFB
    finally:
        ws.close()


def test_a_token_for_a_server_since_deleted_opens_nothing(
        console_world: dict[str, Any], run_schedule, store) -> None:
    proxy, uuid = console_world["proxy"], console_world["uuid"]
    token = token_in(url_of(run_schedule, console_world))
    done = run_schedule("destroy", uuid, "--wait", timeout=120)
    assert done.code == 0, done.stderr
    assert " 404 " in proxy.refused(f"/?token={token}")
    # And no new one is issued.
    got = run_schedule("console", uuid, "--url", config=console_world["config"])
    assert got.code != 0 and "no instance" in got.stderr


def test_the_relay_admits_only_the_console_proxys_certificate(
        console_world: dict[str, Any]) -> None:
    pki: Pki = console_world["pki"]
    address, _, port = console_world["relay"].rpartition(":")

    def ask(cert: Any | None) -> bytes:
        context = ssl.create_default_context(cafile=str(pki.ca_cert))
        if cert is not None:
            context.load_cert_chain(str(cert.cert), str(cert.key))
        with socket.create_connection((address, int(port)), timeout=10) as raw, \
                context.wrap_socket(raw, server_hostname=address) as tls:
            tls.sendall(remote_consoles.request_line(console_world["uuid"]))
            return tls.recv(200)

    operator = pki.issue("console-test-operator", OPERATOR)
    assert ask(operator).startswith(b"NO not the console proxy's certificate")
    try:
        answer = ask(None)
    except (ssl.SSLError, OSError):
        answer = b""
    assert answer == b""  # no certificate: the handshake fails, nothing is said
    proxy_cert = pki.issue("console-proxy-tests", CONSOLE_PROXY)
    assert ask(proxy_cert).startswith(b"OK\n")

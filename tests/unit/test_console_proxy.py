"""The console proxy's admission (console_proxy.py): only a token in the path (no target,
no path), Nova's origin check, the token consumed, the server's host found by the proxy
itself, its relay over mutual TLS; each refusal with its status. The relay here is the
real one (compute/console_relay.py) on loopback, the guest's screen a socket pair; the
proxy under a browser and a real guest: tests/virt/test_remote_console_vm.py."""

from __future__ import annotations

import uuid as uuidlib
from collections.abc import Iterator

import pytest

from etcd_compute import messages, remote_consoles
from etcd_compute.compute.console_relay import ConsoleRelay, server_context
from etcd_compute.console_proxy import (
    Refused,
    check_origin,
    listen_address,
    open_console,
    relay_context,
    token_of,
)
from etcd_compute.errors import ConfigError
from etcd_compute.hosts import publish_console_address
from etcd_compute.instances import records, states
from etcd_compute.pki import CONSOLE_PROXY, CONSOLE_RELAY, Pki
from tests.support import make_spec
from tests.unit.compute.test_console_relay import StandInScreens
from tests.unit.fakes import FakeStore

HOST = str(uuidlib.uuid4())
TOKEN = "T" * 43


@pytest.mark.parametrize(("path", "cookie", "token"), [
    (f"/?token={TOKEN}", None, TOKEN),
    (f"/websockify?token={TOKEN}", None, TOKEN),
    ("/", f"token={TOKEN}", TOKEN),
    ("/", f"other=1; token={TOKEN}", TOKEN),
])
def test_the_token_comes_from_the_path_or_novncs_cookie(path, cookie, token):
    assert token_of(path, cookie) == token


@pytest.mark.parametrize(("path", "status", "words"), [
    (f"/?token={TOKEN}&host=10.0.0.1&port=5900", 400, "not 'host'"),
    (f"/?target=10.0.0.1:5900&token={TOKEN}", 400, "not 'target'"),
    (f"/10.0.0.1:5900?token={TOKEN}", 400, "not a path"),
    (f"/?token={TOKEN}&token={TOKEN}", 400, "one token"),
    ("/?token", 400, "malformed"),
    ("/?a=1&b=2&c=3&d=4&e=5", 400, "malformed"),
    ("/", 403, "no console token"),
])
def test_anything_but_a_token_is_refused(path, status, words):
    with pytest.raises(Refused, match=words) as refusal:
        token_of(path, None)
    assert refusal.value.status == status


@pytest.mark.parametrize(("origin", "host", "allowed", "ok"), [
    (None, "proxy:6080", [], True),
    ("http://proxy:6080", "proxy:6080", [], True),
    ("https://proxy", "proxy:6080", [], True),
    ("http://evil.example", "proxy:6080", [], False),
    ("http://dash.example", "proxy:6080", ["dash.example"], True),
    ("null", "proxy:6080", [], False),
])
def test_novas_origin_check(origin, host, allowed, ok):
    if ok:
        check_origin(origin, host, allowed)
    else:
        with pytest.raises(Refused) as refusal:
            check_origin(origin, host, allowed)
        assert refusal.value.status == 403


@pytest.mark.parametrize("listen", ["localhost:6080", "127.0.0.1", "127.0.0.1:x"])
def test_the_listen_address_is_an_ip_and_a_port(listen):
    with pytest.raises(ConfigError, match="console.proxy_listen"):
        listen_address(listen)


def test_the_proxy_needs_its_certificate(tmp_path):
    with pytest.raises(ConfigError, match="console.cert is needed"):
        relay_context({"cert": None, "key": None, "ca_cert": None}, None)


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Pki:
    pki = Pki(tmp_path_factory.mktemp("pki"))
    pki.init("proxy-tests")
    return pki


@pytest.fixture
def world(pki: Pki) -> Iterator[dict]:
    """A store with an ACTIVE instance on HOST, HOST's relay on loopback."""
    store = FakeStore()
    spec = make_spec(HOST)
    uuid = spec["uuid"]
    store.put(messages.INSTANCE_LOCATION, store.keys.location(uuid), {"host": HOST})
    store.put(messages.INSTANCE_RECORD, store.keys.record(HOST, uuid),
              records.new_record(spec, states.BUILDING))
    issued = pki.issue("console-relay-unit", CONSOLE_RELAY, ips=["127.0.0.1"])
    screens = StandInScreens()
    relay = ConsoleRelay("127.0.0.1:0", server_context(
        {"cert": str(issued.cert), "key": str(issued.key), "ca_cert": str(pki.ca_cert)},
        None), screens)
    publish_console_address(store, HOST, relay.start())
    proxy = pki.issue("console-proxy-unit", CONSOLE_PROXY)
    context = relay_context({"cert": str(proxy.cert), "key": str(proxy.key),
                             "ca_cert": str(pki.ca_cert)}, None)
    yield {"store": store, "uuid": uuid, "screens": screens, "context": context}
    relay.stop()


def test_a_token_opens_its_servers_screen_through_the_relay(world):
    store, uuid = world["store"], world["uuid"]
    guest = world["screens"].add(uuid)
    token = remote_consoles.issue(store, uuid, 600, "someone")
    relay = open_console(store, world["context"], token)
    guest.sendall(b"RFB 003.008\n")
    assert relay.recv(12) == b"RFB 003.008\n"
    relay.close()
    with pytest.raises(Refused, match="already used") as refusal:
        open_console(store, world["context"], token)
    assert refusal.value.status == 403


def test_a_server_gone_or_being_deleted_opens_nothing(world):
    store, uuid = world["store"], world["uuid"]
    world["screens"].add(uuid)
    token = remote_consoles.issue(store, uuid, 600, "someone")
    record = records.read_record(store, HOST, uuid).record
    store.put(messages.INSTANCE_RECORD, store.keys.record(HOST, uuid),
              {**record, "state": states.DELETING})
    with pytest.raises(Refused, match="gone") as refusal:
        open_console(store, world["context"], token)
    assert refusal.value.status == 404
    token = remote_consoles.issue(store, str(uuidlib.uuid4()), 600, "someone")
    with pytest.raises(Refused, match="gone"):
        open_console(store, world["context"], token)


def test_a_host_without_a_relay_or_a_guest_without_a_screen(world):
    store, uuid = world["store"], world["uuid"]
    token = remote_consoles.issue(store, uuid, 600, "someone")
    with pytest.raises(Refused, match="no screen running") as refusal:
        open_console(store, world["context"], token)
    assert refusal.value.status == 502
    publish_console_address(store, HOST, None)
    token = remote_consoles.issue(store, uuid, 600, "someone")
    with pytest.raises(Refused, match="serves no remote console") as refusal:
        open_console(store, world["context"], token)
    assert refusal.value.status == 503


def test_a_relay_with_a_certificate_of_another_ca_is_not_trusted(world, tmp_path):
    other = Pki(tmp_path / "other")
    other.init("other")
    proxy = other.issue("console-proxy-other", CONSOLE_PROXY)
    context = relay_context({"cert": str(proxy.cert), "key": str(proxy.key),
                             "ca_cert": str(other.ca_cert)}, None)
    world["screens"].add(world["uuid"])
    token = remote_consoles.issue(world["store"], world["uuid"], 600, "someone")
    with pytest.raises(Refused, match="console relay") as refusal:
        open_console(world["store"], context, token)
    assert refusal.value.status == 502


def test_a_screens_worth_of_bytes_crosses_both_ways_without_waiting_for_more(world):
    """Many TLS records at once: what TLS has decrypted is carried on at once (websockify
    reads its target once per wakeup; the carrier reads TLS's own buffer first)."""
    import socket
    import threading

    from etcd_compute.console_proxy import _carry

    store, uuid = world["store"], world["uuid"]
    guest = world["screens"].add(uuid)
    relay = open_console(store, world["context"], remote_consoles.issue(
        store, uuid, 600, "someone"))
    inner, outer = socket.socketpair()
    threading.Thread(target=_carry, args=(relay, outer), daemon=True).start()
    screen = bytes(range(256)) * 4096  # 1 MiB: 64 TLS records at least
    inner.settimeout(10)
    guest.settimeout(10)
    threading.Thread(target=guest.sendall, args=(screen,), daemon=True).start()
    got = b""
    while len(got) < len(screen):
        got += inner.recv(1 << 20)
    assert got == screen
    threading.Thread(target=inner.sendall, args=(screen,), daemon=True).start()
    got = b""
    while len(got) < len(screen):
        got += guest.recv(1 << 20)
    assert got == screen
    inner.close()
    assert guest.recv(10) == b""  # the browser went: the guest's end closes


def test_what_a_client_sent_is_escaped_before_a_status_line_or_a_log_line():
    from etcd_compute.console_proxy import _printable

    with pytest.raises(Refused) as refusal:
        token_of(f"/?token={TOKEN}&h%C3%A9%0d%0aSet-Cookie:x=1", None)
    shown = _printable(refusal.value.reason)
    assert shown.isascii() and "\r" not in shown and "\n" not in shown
    assert "\\r\\n" in shown and "\\xe9" in shown


def test_a_silent_client_is_let_go_and_connections_are_capped(world, monkeypatch, tmp_path):
    """A client that sends nothing holds its thread only REQUEST_SECONDS; past
    MAX_CONNECTIONS at once, a new one is closed as it comes; noVNC's page is served."""
    import socket
    import threading
    import time

    import requests

    from etcd_compute import console_proxy

    monkeypatch.setattr(console_proxy, "REQUEST_SECONDS", 0.5)
    monkeypatch.setattr(console_proxy, "MAX_CONNECTIONS", 2)
    web = tmp_path / "novnc"
    web.mkdir()
    (web / "vnc_lite.html").write_text("<title>noVNC</title>")
    server = console_proxy.ProxyServer(
        {"console": {"proxy_listen": "127.0.0.1:0", "web_dir": str(web),
                     "allowed_origins": []}}, world["store"], world["context"])
    threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05},
                     daemon=True).start()
    port = server.server_address[1]
    try:
        silent = [socket.create_connection(("127.0.0.1", port), timeout=5) for _ in range(2)]
        time.sleep(0.2)
        third = socket.create_connection(("127.0.0.1", port), timeout=5)
        assert third.recv(10) == b""  # closed at once: two are served already
        started = time.monotonic()
        assert silent[0].recv(10) == b""  # let go after REQUEST_SECONDS
        assert time.monotonic() - started < 3
        time.sleep(0.2)
        page = requests.get(f"http://127.0.0.1:{port}/vnc_lite.html", timeout=5)
        assert page.status_code == 200 and "noVNC" in page.text
        assert requests.get(f"http://127.0.0.1:{port}/", timeout=5).status_code == 404
    finally:
        server.shutdown()
        server.server_close()

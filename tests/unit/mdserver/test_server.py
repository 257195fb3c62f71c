"""mdserver/server.py: the WSGI application (the asking guest's own data, or 404; only GET and
HEAD), the socket and waitress's limits from mdserver.conf, the metadata address kept on the
network's bridge, and main's exit statuses. The server as a real process is in
tests/virt/test_mdserver_limits.py; which guest sees what, in test_resolver.py."""

from __future__ import annotations

import socket
from dataclasses import replace
from typing import Any

import libvirt
import pytest

from etcd_compute.errors import ConfigError
from etcd_compute.mdserver import server
from etcd_compute.mdserver.server import MetadataAddressKeeper, MetadataApp
from etcd_compute.mdserver.settings import MdserverConfig
from etcd_compute.mdserver.signed import SignedResolver
from etcd_compute.virt import network

GUEST = "192.168.123.50"
META = {"uuid": "0b7e4f1e-9a0c-4a51-8f0e-5d2c3b4a6e7f", "hostname": "web-1",
        "user_data": "#cloud-config\n", "ssh_key": None}


class Resolver:
    """One guest of ours at GUEST; records who asked."""

    def __init__(self) -> None:
        self.asked: list[str] = []

    def meta_for_request(self, environ: dict[str, Any]) -> dict[str, Any] | None:
        self.asked.append(environ["REMOTE_ADDR"])
        return META if environ["REMOTE_ADDR"] == GUEST else None


def call(app: MetadataApp, path: str, method: str = "GET",
         source: str = GUEST) -> tuple[str, dict[str, str], bytes]:
    started: list[Any] = []
    body = b"".join(app({"REQUEST_METHOD": method, "PATH_INFO": path, "REMOTE_ADDR": source},
                        lambda status, headers: started.append((status, dict(headers)))))
    (status, headers), = started
    return status, headers, body


@pytest.fixture
def app() -> MetadataApp:
    return MetadataApp(Resolver())


def test_a_guest_gets_its_own_data(app):
    status, headers, body = call(app, "/latest/meta-data/instance-id")
    assert (status, body) == ("200 OK", META["uuid"].encode())
    assert headers == {"Content-Type": "text/plain; charset=utf-8",
                       "Content-Length": str(len(body))}
    assert call(app, "/latest/user-data")[2] == b"#cloud-config\n"


@pytest.mark.parametrize(("path", "source"), [
    ("/latest/meta-data/instance-id", "192.168.123.51"),  # not a guest of ours
    ("/latest/meta-data/instance-id", ""),
    ("/latest/no-such-thing", GUEST),                      # ours, but no such path
])
def test_anything_else_is_an_empty_404(app, path, source):
    assert call(app, path, source=source) == (
        "404 Not Found", {"Content-Type": "text/plain", "Content-Length": "0"}, b"")


@pytest.mark.parametrize("method", ["POST", "PUT", "DELETE", "PATCH", "", "OPTIONS"])
def test_guests_only_read(app, method):
    assert call(app, "/latest/meta-data/instance-id", method)[:2] == (
        "405 Method Not Allowed", {"Content-Type": "text/plain", "Content-Length": "0"})
    assert app.resolver.asked == []  # refused before anyone looked the guest up


def test_head_has_the_length_of_get_and_no_body(app):
    get = call(app, "/latest/meta-data/hostname")
    head = call(app, "/latest/meta-data/hostname", "HEAD")
    assert head == (get[0], get[1], b"") and get[2] == b"web-1"


# -- socket and limits --------------------------------------------------------------------


def test_the_socket_binds_an_address_the_host_does_not_have_yet():
    """IP_FREEBIND: the server starts before 169.254.169.254 is on the bridge."""
    sock = server.listening_socket(MdserverConfig(bind_address="192.0.2.123", port=0))
    try:
        assert sock.getsockname()[0] == "192.0.2.123"
        assert sock.getsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR)
    finally:
        sock.close()


@pytest.mark.parametrize(("idle", "cleanup"), [(10, 5), (1, 1), (3, 1)])
def test_waitress_gets_the_limits_of_mdserver_conf(idle, cleanup):
    config = MdserverConfig(bind_address="127.0.0.1", port=0, threads=3, connection_limit=7,
                            idle_timeout_seconds=idle, max_request_header_bytes=4096,
                            max_request_body_bytes=10)
    sock = server.listening_socket(config)
    waitress = server.create_server(config, sock)
    try:
        adj = waitress.adj
        assert (adj.threads, adj.connection_limit, adj.channel_timeout) == (3, 7, idle)
        assert adj.asyncore_use_poll  # connection_limit may pass select()'s 1024 descriptors
        assert waitress.channel_class.counts.per_source == config.connections_per_guest
        # Idle connections are looked for at least every half idle timeout.
        assert adj.cleanup_interval == cleanup
        assert (adj.max_request_header_size, adj.max_request_body_size) == (4096, 10)
        assert adj.expose_tracebacks is False
        assert adj.clear_untrusted_proxy_headers  # a guest's own X-Forwarded-For: dropped
    finally:
        waitress.close()
        sock.close()


def test_in_signed_mode_the_secret_is_read_and_no_per_source_cap_holds_the_agent(tmp_path):
    secret = tmp_path / "secret"
    secret.write_text("abc\n")
    secret.chmod(0o600)
    config = MdserverConfig(bind_address="127.0.0.1", port=0, mode="signed",
                            shared_secret_file=str(secret))
    resolver = server.resolver_for(config)
    assert isinstance(resolver, SignedResolver) and resolver.secret == b"abc"
    sock = server.listening_socket(config)
    waitress = server.create_server(config, sock, resolver)
    try:
        # Every connection is the agent's: a per-source cap would cap all guests together.
        assert not hasattr(waitress.channel_class, "counts")
        # The agent's X-Forwarded-For reaches us (local-ipv4).
        assert not waitress.adj.clear_untrusted_proxy_headers
    finally:
        waitress.close()
        sock.close()


def test_a_secret_others_may_read_is_exit_2_before_listening(tmp_path, capsys):
    secret = tmp_path / "secret"
    secret.write_text("abc\n")
    secret.chmod(0o644)
    conf = tmp_path / "mdserver.conf"
    conf.write_text(f"[mdserver]\nmode = signed\nshared_secret_file = {secret}\n"
                    "bind_address = 127.0.0.1\nport = 1\n")
    assert server.main(["--config", str(conf)]) == 2
    assert "readable by others than its owner" in capsys.readouterr().err


@pytest.fixture
def open_files(monkeypatch: pytest.MonkeyPatch) -> dict[str, tuple[int, int]]:
    """The process's open-files limit (soft, hard), as setrlimit would change it."""
    limit = {"now": (1024, 4096)}
    monkeypatch.setattr(server.resource, "getrlimit", lambda _which: limit["now"])
    monkeypatch.setattr(server.resource, "setrlimit",
                        lambda _which, value: limit.__setitem__("now", value))
    return limit


@pytest.mark.parametrize(("connections", "before", "after"), [
    (1024, (1024, 4096), (1024 + server.SPARE_FILES, 4096)),   # raised to what it needs
    (100, (1024, 4096), (1024, 4096)),                         # enough already: left alone
    (4000, (256, server.resource.RLIM_INFINITY), (4000 + server.SPARE_FILES,
                                                  server.resource.RLIM_INFINITY)),
])
def test_the_open_files_limit_is_raised_for_connection_limit(open_files, connections, before,
                                                             after):
    open_files["now"] = before
    server.raise_open_files_limit(MdserverConfig(connection_limit=connections))
    assert open_files["now"] == after


def test_a_hard_open_files_limit_below_connection_limit_is_a_config_error(open_files):
    open_files["now"] = (1024, 2048)
    with pytest.raises(ConfigError, match=r"connection_limit 5000 needs 5064 open files but "
                                          r"this process may open 2048 \(raise its hard"):
        server.raise_open_files_limit(MdserverConfig(connection_limit=5000))
    assert open_files["now"] == (1024, 2048)


# -- the address on the bridge ------------------------------------------------------------


@pytest.fixture
def addresses(monkeypatch: pytest.MonkeyPatch) -> dict[str, list[str]]:
    """The bridges' metadata addresses, as `ip address` would change them."""
    held: dict[str, list[str]] = {}
    monkeypatch.setattr(network, "has_metadata_address", lambda bridge: bridge in held)
    monkeypatch.setattr(network, "add_metadata_address",
                        lambda bridge: held.setdefault(bridge, []).append("added"))
    monkeypatch.setattr(network, "remove_metadata_address", lambda bridge: held.pop(bridge))
    return held


TEST_DRIVER = MdserverConfig(libvirt_uri="test:///default", network="default")


def test_the_address_is_added_to_the_running_networks_bridge_once(addresses):
    keeper = MetadataAddressKeeper(TEST_DRIVER)  # the test driver's "default" is on virbr0
    keeper.check()
    keeper.check()
    assert addresses == {"virbr0": ["added"]} and keeper.bridge == "virbr0"
    keeper.remove()
    assert addresses == {}


def test_without_the_network_nothing_is_added_or_removed(addresses):
    keeper = MetadataAddressKeeper(replace(TEST_DRIVER, network="etcd-compute-none"))
    keeper.check()
    keeper.remove()
    assert addresses == {} and keeper.bridge is None


def test_a_stopped_network_gets_no_address(addresses):
    # The test driver keeps what was defined while a connection of this process is open.
    connection = libvirt.open("test:///default")
    net = connection.networkDefineXML(
        "<network><name>etcd-compute-stopped</name><bridge name='virbr-stopped'/></network>")
    try:
        keeper = MetadataAddressKeeper(replace(TEST_DRIVER, network="etcd-compute-stopped"))
        keeper.check()
        assert addresses == {} and keeper.bridge is None
    finally:
        net.undefine()
        connection.close()


# -- main -----------------------------------------------------------------------------------


def test_a_bad_config_is_one_line_and_exit_2(tmp_path, capsys):
    conf = tmp_path / "mdserver.conf"
    conf.write_text("[mdserver]\nport = 0\n")
    assert server.main(["--config", str(conf)]) == 2
    out, err = capsys.readouterr()
    assert out == "" and err == f"{conf}: mdserver.port: 0 is not in 1..65535\n"


def test_an_open_files_limit_too_low_for_connection_limit_is_exit_2(tmp_path, monkeypatch,
                                                                     capsys):
    monkeypatch.setattr(server.resource, "getrlimit", lambda _which: (1024, 1024))
    conf = tmp_path / "mdserver.conf"
    conf.write_text("[mdserver]\nconnection_limit = 2000\n")
    assert server.main(["--config", str(conf)]) == 2
    assert capsys.readouterr().err.startswith("mdserver.connection_limit 2000 needs 2064 open ")


def test_an_address_it_cannot_serve_on_is_exit_3(tmp_path, monkeypatch, caplog):
    monkeypatch.setattr(server.logging, "basicConfig", lambda **_kwargs: None)
    taken = socket.socket()
    taken.bind(("127.0.0.1", 0))
    taken.listen()
    port = taken.getsockname()[1]
    conf = tmp_path / "mdserver.conf"
    conf.write_text(f"[mdserver]\nbind_address = 127.0.0.1\nport = {port}\n")
    try:
        assert server.main(["--config", str(conf)]) == 3
    finally:
        taken.close()
    assert f"cannot serve on 127.0.0.1:{port}: " in caplog.text

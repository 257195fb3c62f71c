"""The console relay (compute/console_relay.py) on loopback with real TLS and certificates
of a CA made here, the guests' screens a stand-in: only the console proxy's certificate is
admitted, only a request naming a running guest opens anything, and then bytes go both
ways. The relay on a real host with a real guest: tests/virt/test_remote_console_vm.py."""

from __future__ import annotations

import socket
import ssl
from collections.abc import Iterator
from pathlib import Path

import pytest

from etcd_compute import remote_consoles
from etcd_compute.compute import console_relay
from etcd_compute.compute.console_relay import ConsoleRelay, listen_address, server_context
from etcd_compute.drivers import Screens
from etcd_compute.errors import ConfigError
from etcd_compute.pki import COMPUTE, CONSOLE_PROXY, CONSOLE_RELAY, LIBVIRT_CLIENT, Pki

UUID = "0b7e4f1e-9a0c-4a51-8f0e-5d2c3b4a6e7f"


class StandInScreens(Screens):
    """A guest's screen: one end of a socket pair, the test holds the other."""

    def __init__(self) -> None:
        self.guests: dict[str, socket.socket] = {}
        self.closed = False

    def add(self, uuid: str) -> socket.socket:
        here, there = socket.socketpair()
        self.guests[uuid] = here
        return there

    def open(self, uuid: str) -> socket.socket | None:
        return self.guests.pop(uuid, None)

    def close(self) -> None:
        self.closed = True


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Pki:
    pki = Pki(tmp_path_factory.mktemp("pki"))
    pki.init("relay-tests")
    return pki


@pytest.fixture
def relay(pki: Pki) -> Iterator[tuple[ConsoleRelay, StandInScreens]]:
    issued = pki.issue("console-relay-hv1", CONSOLE_RELAY, ips=["127.0.0.1"])
    settings = {"cert": str(issued.cert), "key": str(issued.key), "ca_cert": str(pki.ca_cert)}
    screens = StandInScreens()
    relay = ConsoleRelay("127.0.0.1:0", server_context(settings, None), screens)
    relay.start()
    yield relay, screens
    relay.stop()
    assert screens.closed


def connect(relay: ConsoleRelay, pki: Pki, name: str | None, kind: str = CONSOLE_PROXY,
            ) -> ssl.SSLSocket:
    context = ssl.create_default_context(cafile=str(pki.ca_cert))
    if name is not None:
        issued = pki.issue(name, kind)
        context.load_cert_chain(str(issued.cert), str(issued.key))
    host, port = relay.listening.rsplit(":", 1)
    raw = socket.create_connection((host, int(port)), timeout=10)
    return context.wrap_socket(raw, server_hostname=host)


def ask(tls: ssl.SSLSocket, line: bytes) -> bytes:
    tls.sendall(line)
    answer = b""
    while not answer.endswith(b"\n"):
        chunk = tls.recv(1)
        if not chunk:
            break
        answer += chunk
    return answer


def test_the_proxy_gets_a_running_guests_screen_both_ways(relay, pki):
    server, screens = relay
    guest = screens.add(UUID)
    with connect(server, pki, "console-proxy") as tls:
        assert ask(tls, remote_consoles.request_line(UUID)) == b"OK\n"
        guest.sendall(b"RFB 003.008\n")
        assert tls.recv(12) == b"RFB 003.008\n"
        tls.sendall(b"RFB 003.008\n")
        guest.settimeout(10)
        assert guest.recv(12) == b"RFB 003.008\n"
    guest.settimeout(10)
    assert guest.recv(10) == b""  # the proxy went: the guest's end is closed


@pytest.mark.parametrize(("name", "kind"), [("compute-x", COMPUTE),
                                            ("libvirt-client-x", LIBVIRT_CLIENT),
                                            ("operator-x", "operator")])
def test_any_other_certificate_of_the_ca_is_refused(relay, pki, name, kind):
    server, screens = relay
    screens.add(UUID)
    with connect(server, pki, name, kind) as tls:
        assert ask(tls, remote_consoles.request_line(UUID)) == \
            b"NO not the console proxy's certificate\n"
    assert UUID in screens.guests  # never opened


def test_no_certificate_no_conversation(relay, pki):
    server, screens = relay
    screens.add(UUID)
    try:
        with connect(server, pki, None) as tls:
            answer = ask(tls, remote_consoles.request_line(UUID))
    except (ssl.SSLError, OSError):
        answer = b""
    assert answer == b""
    assert UUID in screens.guests


@pytest.mark.parametrize("line", [b"CONSOLE 10.0.0.1:5900\n", b"GET / HTTP/1.1\n",
                                  b"x" * 100 + b"\n"])
def test_anything_but_a_request_for_an_instance_is_refused(relay, pki, line):
    server, _ = relay
    with connect(server, pki, "console-proxy") as tls:
        answer = ask(tls, line)
    assert answer in (b"NO not a console request\n", b"")  # too long: closed


def test_a_guest_not_running_here_has_no_screen(relay, pki):
    server, _ = relay
    with connect(server, pki, "console-proxy") as tls:
        assert ask(tls, remote_consoles.request_line(UUID)) == \
            f"NO instance {UUID} has no screen running on this host\n".encode()


def test_many_connections_are_carried_at_once(relay, pki):
    server, screens = relay
    guests = [screens.add(f"{n:08x}-9a0c-4a51-8f0e-5d2c3b4a6e7f") for n in range(3)]
    sessions = []
    for n in range(3):
        tls = connect(server, pki, "console-proxy")
        assert ask(tls, remote_consoles.request_line(
            f"{n:08x}-9a0c-4a51-8f0e-5d2c3b4a6e7f")) == b"OK\n"
        sessions.append(tls)
    for n, (guest, tls) in enumerate(zip(guests, sessions, strict=True)):
        guest.sendall(f"screen {n}\n".encode())
        assert tls.recv(9) == f"screen {n}\n".encode()
        tls.close()


@pytest.mark.parametrize("listen", ["localhost:6081", "10.0.0.1", "10.0.0.1:0x10",
                                    "10.0.0.1:70000"])
def test_the_listen_address_is_an_ip_and_a_port(listen):
    with pytest.raises(ConfigError, match="console.listen"):
        listen_address(listen)


def test_the_relay_needs_its_certificate_key_and_ca(tmp_path: Path, pki):
    with pytest.raises(ConfigError, match="console.cert is needed"):
        server_context({"cert": None, "key": None, "ca_cert": None}, str(pki.ca_cert))
    with pytest.raises(ConfigError, match="no such file"):
        server_context({"cert": str(tmp_path / "x"), "key": str(tmp_path / "y")},
                       str(pki.ca_cert))


def test_only_the_console_proxy_unit_is_the_proxy():
    assert console_relay.is_console_proxy(
        {"subject": ((("organizationalUnitName", "console-proxy"),),
                     (("commonName", "p"),))})
    assert not console_relay.is_console_proxy(
        {"subject": ((("commonName", "console-proxy"),),)})
    assert not console_relay.is_console_proxy(None)

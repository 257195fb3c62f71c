"""The console relay: the console proxy's one way to this host's guests' screens.

Each guest's VNC is a unix socket of libvirt's on this host (`virt/domain.py`), reachable
by nobody elsewhere. The relay listens on `console.listen` (the host's cluster address)
for mutual-TLS connections: the peer must hold a certificate of the cluster CA whose
subject carries `OU=console-proxy` (`pki.CONSOLE_PROXY`); a host's, an operator's or a
libvirt certificate is refused. The proxy names one instance (`remote_consoles`' request
line); the relay answers `OK` and carries that guest's VNC both ways only if the driver
has it running here with a screen (`Screens.open`: libvirt hands a connected descriptor;
the guest's VNC listens nowhere), else `NO` with the reason. It takes no host, port or
path from anyone: it is no open relay.
"""

from __future__ import annotations

import logging
import socket
import ssl
import threading
from pathlib import Path
from typing import Any

from etcd_compute import config as configuration
from etcd_compute import remote_consoles
from etcd_compute.drivers import Screens, load_screens
from etcd_compute.errors import ConfigError
from etcd_compute.pki import CONSOLE_PROXY_UNIT

LOG = logging.getLogger("etcd_compute.compute.console_relay")

# Connections carried at once; more wait for the TLS handshake's slot.
MAX_CONNECTIONS = 64
HANDSHAKE_SECONDS = 10.0


def listen_address(listen: str) -> tuple[str, int]:
    """(host, port) of `console.listen` (`IP:PORT`): ConfigError otherwise."""
    return configuration.ip_port(listen, "console.listen", free_port=True)


def server_context(settings: dict[str, Any], etcd_ca: str | None) -> ssl.SSLContext:
    """TLS for the relay: its certificate, and client certificates of the CA required."""
    ca = settings.get("ca_cert") or etcd_ca
    for name, path in (("cert", settings.get("cert")), ("key", settings.get("key")),
                       ("ca_cert", ca)):
        if not path:
            raise ConfigError(f"console.{name} is needed with console.listen (the relay "
                              "speaks mutual TLS only)")
        if not Path(path).is_file():
            raise ConfigError(f"console.{name} {path}: no such file")
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    context.load_cert_chain(settings["cert"], settings["key"])
    context.load_verify_locations(ca)
    context.verify_mode = ssl.CERT_REQUIRED
    return context


def is_console_proxy(peer: dict[str, Any] | None) -> bool:
    """Whether a verified peer certificate (`getpeercert()`) is the console proxy's."""
    for rdn in (peer or {}).get("subject", ()):
        for name, value in rdn:
            if name == "organizationalUnitName" and value == CONSOLE_PROXY_UNIT:
                return True
    return False


class ConsoleRelay:
    """The relay's listening socket and its connections (threads of the compute's main
    process); `screens` gives a running guest's screen."""

    def __init__(self, listen: str, context: ssl.SSLContext, screens: Screens):
        self.address = listen_address(listen)
        self.context = context
        self.screens = screens
        self.slots = threading.BoundedSemaphore(MAX_CONNECTIONS)
        self.stopping = threading.Event()
        self.sock: socket.socket | None = None
        self.listening: str | None = None  # `HOST:PORT`, once started

    def start(self) -> str:
        """Listen; the `HOST:PORT` it listens on (the port the system chose for port 0)."""
        host, port = self.address
        family = socket.AF_INET6 if ":" in host else socket.AF_INET
        sock = socket.socket(family, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((host, port))
        sock.listen(16)
        self.sock = sock
        port = sock.getsockname()[1]
        threading.Thread(target=self._accept, name="console-relay", daemon=True).start()
        shown = f"[{host}]" if ":" in host else host
        self.listening = f"{shown}:{port}"
        LOG.info("console relay listening on %s", self.listening)
        return self.listening

    def stop(self) -> None:
        self.stopping.set()
        if self.sock is not None:
            try:
                self.sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            self.sock.close()
        self.screens.close()

    def _accept(self) -> None:
        assert self.sock is not None
        while not self.stopping.is_set():
            try:
                conn, peer = self.sock.accept()
            except OSError:
                return  # closed: stopping
            if not self.slots.acquire(blocking=False):
                conn.close()
                LOG.warning("console relay: %s refused, %d connections carried already",
                            peer[0], MAX_CONNECTIONS)
                continue
            threading.Thread(target=self._serve, args=(conn, peer[0]), daemon=True,
                             name="console-relay-conn").start()

    def _serve(self, conn: socket.socket, peer: str) -> None:
        try:
            self._relay(conn, peer)
        except (OSError, ssl.SSLError, ValueError) as exc:
            LOG.info("console relay: connection from %s ended: %s", peer, exc)
        finally:
            conn.close()
            self.slots.release()

    def _relay(self, conn: socket.socket, peer: str) -> None:
        conn.settimeout(HANDSHAKE_SECONDS)
        tls = self.context.wrap_socket(conn, server_side=True)
        try:
            # The request is read first (64 bytes at most, within the handshake's time), so
            # that a refusal is read by its peer instead of lost in a reset.
            line = _read_line(tls, remote_consoles.REQUEST_MAX_BYTES)
            if not is_console_proxy(tls.getpeercert()):
                LOG.warning("console relay: %s refused: its certificate is not the console "
                            "proxy's", peer)
                tls.sendall(remote_consoles.answer_no("not the console proxy's certificate"))
                return
            try:
                uuid = remote_consoles.parse_request(line)
            except ValueError:
                tls.sendall(remote_consoles.answer_no("not a console request"))
                return
            try:
                guest = self.screens.open(uuid)
            except Exception as exc:  # noqa: BLE001 (the hypervisor's failure, one line)
                LOG.warning("instance %s: console relay: %s", uuid, exc)
                guest = None
            if guest is None:
                tls.sendall(remote_consoles.answer_no(
                    f"instance {uuid} has no screen running on this host"))
                return
            try:
                tls.sendall(remote_consoles.answer_ok())
                LOG.info("instance %s: console opened for %s", uuid, peer)
                tls.settimeout(None)
                guest.settimeout(None)
                remote_consoles.pipe(tls, guest)
                LOG.info("instance %s: console closed", uuid)
            finally:
                guest.close()
        finally:
            tls.close()


def _read_line(sock: socket.socket, limit: int) -> bytes:
    """One line of at most `limit` bytes, read a byte at a time (nothing past it is taken
    from the stream)."""
    line = b""
    while not line.endswith(b"\n"):
        if len(line) >= limit:
            raise ValueError("request line too long")
        byte = sock.recv(1)
        if not byte:
            raise ValueError("closed before its request")
        line += byte
    return line


def start(config: dict[str, Any]) -> ConsoleRelay | None:
    """The compute's console relay, listening, when `console.listen` is set and the driver
    gives guests screens; else None (the fake driver: no VMs, no screens: said once)."""
    settings = config["console"]
    if settings["listen"] is None:
        return None
    screens = load_screens(config)
    if screens is None:
        LOG.warning("console.listen is set, but driver %s gives guests no screen: no console "
                    "relay", config["driver"]["name"])
        return None
    relay = ConsoleRelay(settings["listen"], server_context(settings, config["etcd"]["ca_cert"]),
                         screens)
    relay.start()
    return relay

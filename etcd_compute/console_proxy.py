"""`schedule.py console-proxy`: noVNC and the websockets behind it, as nova-novncproxy.

It serves noVNC's files (`console.web_dir`, Debian's `novnc`) and upgrades a request to a
websocket only once everything below holds; otherwise it answers a plain HTTP error with
the reason and opens nothing:

1. the path carries exactly one parameter, `token` (or noVNC's `token` cookie): a path
   naming a host, a port or anything else is refused (400), so nobody can point the proxy
   at a target;
2. a browser's `Origin` names the proxy's own host or one of `console.allowed_origins`
   (as Nova's proxy checks it: 403);
3. the token is consumed (`remote_consoles.consume`: it existed, was not expired, and
   nobody used it before; 403) and names a server;
4. the proxy finds that server's host itself (`/instances/<uuid>`; gone or being deleted:
   404) and the host's console relay (its stats' `console_address`; none: 503);
5. the relay, over mutual TLS (the proxy's `console-proxy` certificate, the relay's
   checked against the cluster CA and the host's address), says OK for that server (502
   with its reason otherwise).

Then the browser's websocket carries the guest's RFB through the relay (websockify's
`do_proxy`). The proxy holds the operator's etcd credentials (it reads where servers are
and consumes tokens) and no hypervisor's.
"""

from __future__ import annotations

import http.cookies
import logging
import signal
import socket
import ssl
import threading
from http.server import HTTPServer
from pathlib import Path
from socketserver import ThreadingMixIn
from typing import Any
from urllib import parse

from etcd_compute import config as configuration
from etcd_compute import remote_consoles
from etcd_compute.errors import ConfigError, EtcdComputeError
from etcd_compute.etcd import KeyValueStore
from etcd_compute.hosts import console_address
from etcd_compute.instances import records, states

LOG = logging.getLogger("etcd_compute.console_proxy")

RELAY_SECONDS = 10.0
# A client has this long to send its request (and its TLS handshake); an open console has
# no limit.
REQUEST_SECONDS = 30.0
# Connections served at once; more are closed as they come.
MAX_CONNECTIONS = 256


class Refused(Exception):
    """A websocket not opened: the HTTP status and the one-line reason."""

    def __init__(self, status: int, reason: str):
        super().__init__(reason)
        self.status = status
        self.reason = reason


def listen_address(listen: str) -> tuple[str, int]:
    """(host, port) of `console.proxy_listen` (`IP:PORT`): ConfigError otherwise."""
    return configuration.ip_port(listen, "console.proxy_listen", free_port=True)


def token_of(path: str, cookie: str | None) -> str:
    """The token a websocket request carries; Refused for anything else in its path."""
    query = parse.urlsplit(path).query
    try:
        params = parse.parse_qs(query, keep_blank_values=True, strict_parsing=bool(query),
                                max_num_fields=4)
    except ValueError:
        raise Refused(400, "console path: malformed query") from None
    unexpected = sorted(set(params) - {"token"})
    if unexpected:
        raise Refused(400, f"console path: only a token is taken, not {unexpected[0][:40]!r}")
    if parse.urlsplit(path).path not in ("", "/", "/websockify"):
        raise Refused(400, "console path: only a token is taken, not a path")
    tokens = params.get("token", [])
    if len(tokens) > 1:
        raise Refused(400, "console path: one token")
    if tokens:
        return tokens[0]
    if cookie:
        jar = http.cookies.SimpleCookie()
        try:
            jar.load(cookie)
        except http.cookies.CookieError:
            raise Refused(400, "console cookie malformed") from None
        if "token" in jar:
            return jar["token"].value
    raise Refused(403, "no console token")


def check_origin(origin: str | None, host_header: str | None, allowed: list[str]) -> None:
    """Nova's origin check: a browser's Origin must name the host it asked, or one allowed;
    no Origin is a client that is no browser."""
    if origin is None:
        return
    parts = parse.urlsplit(origin)
    if not parts.hostname or not parts.scheme:
        raise Refused(403, "Origin header not valid.")
    expected = parse.urlsplit(f"//{host_header or ''}").hostname
    if parts.hostname not in [*allowed, expected]:
        raise Refused(403, "Origin header does not match this host.")


def relay_context(settings: dict[str, Any], etcd_ca: str | None) -> ssl.SSLContext:
    """TLS toward the relays: the proxy's certificate, the relays' checked by the CA."""
    ca = settings.get("ca_cert") or etcd_ca
    for name, path in (("cert", settings.get("cert")), ("key", settings.get("key")),
                       ("ca_cert", ca)):
        if not path:
            raise ConfigError(f"console.{name} is needed: the console proxy reaches the "
                              "hosts' relays over mutual TLS only")
        if not Path(path).is_file():
            raise ConfigError(f"console.{name} {path}: no such file")
    context = ssl.create_default_context(cafile=ca)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    context.load_cert_chain(settings["cert"], settings["key"])
    return context


def open_console(store: KeyValueStore, context: ssl.SSLContext, token: str) -> ssl.SSLSocket:
    """The token consumed, its server's host found, its relay's OK: the open relay socket
    (the guest's RFB follows). Refused with the status and reason otherwise."""
    try:
        granted = remote_consoles.consume(store, token)
    except remote_consoles.TokenRefused as exc:
        raise Refused(403, str(exc)) from None
    uuid = granted.instance_uuid
    host, read = records.find(store, uuid)
    if host is None or read.record is None or read.state in (states.DELETED,
                                                             states.DELETING):
        raise Refused(404, f"instance {uuid} is gone")
    address = console_address(store, host)
    if address is None:
        raise Refused(503, f"the host of instance {uuid} serves no remote console")
    ip, _, port = address.rpartition(":")
    ip = ip.strip("[]")
    try:
        raw = socket.create_connection((ip, int(port)), timeout=RELAY_SECONDS)
    except OSError as exc:
        raise Refused(502, f"console relay of instance {uuid}'s host unreachable: "
                           f"{exc.strerror or exc}") from None
    try:
        relay = context.wrap_socket(raw, server_hostname=ip)
        relay.sendall(remote_consoles.request_line(uuid))
        answer = _read_line(relay, remote_consoles.ANSWER_MAX_BYTES)
    except (OSError, ssl.SSLError, ValueError) as exc:
        raw.close()
        raise Refused(502, f"console relay of instance {uuid}'s host: {exc}") from None
    reason = remote_consoles.parse_answer(answer)
    if reason is not None:
        relay.close()
        raise Refused(502, f"console relay: {reason}")
    relay.settimeout(None)
    LOG.info("instance %s: console opened (token of %s)", uuid, granted.issued_by)
    return relay


def _read_line(sock: socket.socket, limit: int) -> bytes:
    line = b""
    while not line.endswith(b"\n"):
        if len(line) >= limit:
            raise ValueError("answer too long")
        byte = sock.recv(1)
        if not byte:
            raise ValueError("closed without an answer")
        line += byte
    return line


def _printable(text: str) -> str:
    """`text` in printable ASCII: anything else escaped (a log line, an HTTP status line)."""
    return "".join(ch if " " <= ch <= "~" else ch.encode("unicode_escape").decode() for ch in text)


def _close(sock: socket.socket) -> None:
    try:
        sock.shutdown(socket.SHUT_RDWR)
    except OSError:
        pass
    sock.close()


def _carry(relay: ssl.SSLSocket, outer: socket.socket) -> None:
    """The relay's bytes to and from websockify's end, until either closes."""
    try:
        remote_consoles.pipe(relay, outer)
    except (OSError, ssl.SSLError):
        pass
    finally:
        _close(outer)
        _close(relay)


def handler_class() -> type:
    """websockify's request handler with our admission (imported only by the proxy)."""
    from websockify.websocketproxy import ProxyRequestHandler

    class Handler(ProxyRequestHandler):  # type: ignore[misc]
        relay: ssl.SSLSocket | None = None
        timeout = REQUEST_SECONDS  # until the request is read (no slow client holds a thread)

        def translate_path(self, path: str) -> str:
            self.directory = self.server.web_dir
            return str(super().translate_path(path))

        def validate_connection(self) -> None:
            try:
                token = token_of(self.path, self.headers.get("Cookie"))
                check_origin(self.headers.get("Origin"), self.headers.get("Host"),
                             self.server.allowed_origins)
                self.relay = open_console(self.server.store, self.server.relay_context,
                                          token)
            except Refused as exc:
                reason = _printable(exc.reason)  # the status line is latin-1, one line
                LOG.warning("%s: websocket refused (%d): %s", self.client_address[0],
                            exc.status, reason)
                self.send_error(exc.status, reason)
                raise self.server.Refusal(exc.reason) from None
            except EtcdComputeError as exc:
                LOG.warning("websocket refused: %s", exc)
                self.send_error(503, _printable(str(exc).splitlines()[0][:200]))
                raise self.server.Refusal(str(exc)) from None

        def new_websocket_client(self) -> None:
            self.request.socket.settimeout(None)  # a console may idle: no limit now
            relay, self.relay = self.relay, None
            if relay is None:
                raise self.CClose(1011, "no console")
            # websockify selects on its target and reads it once per wakeup; TLS may hold
            # decrypted bytes no select sees. A thread carries the relay's TLS to a plain
            # socket pair (remote_consoles.pipe reads what TLS holds first): websockify's
            # side of it has no such bytes.
            inner, outer = socket.socketpair()
            carrier = threading.Thread(target=_carry, args=(relay, outer), daemon=True,
                                       name="console-carrier")
            carrier.start()
            try:
                self.do_proxy(inner)
            finally:
                _close(inner)
                carrier.join(RELAY_SECONDS)

        def finish(self) -> None:
            if self.relay is not None:  # opened, but the websocket's handshake failed
                _close(self.relay)
                self.relay = None
            super().finish()

        def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 (http.server's)
            # What a client sent (its request line) is logged escaped, as http.server does.
            LOG.info("%s %s", self.client_address[0], _printable(format % args))

    return Handler


class ProxyServer(ThreadingMixIn, HTTPServer):
    """A thread per connection; TLS toward browsers when `console.web_cert` is set (its
    handshake in that thread)."""

    daemon_threads = True
    # What websockify's handler reads of its server.
    only_upgrade = False
    file_only = True
    verbose = False
    record = ""
    run_once = False
    heartbeat = None
    target_host = "relay"
    target_port = 0
    auth_plugin = None
    token_plugin = None
    wrap_cmd = None
    unix_target = None
    unix_listen = None
    ssl_target = False
    ws_connection = False

    class Refusal(Exception):
        """A websocket refused (the HTTP error is sent)."""

    def __init__(self, config: dict[str, Any], store: KeyValueStore,
                 context: ssl.SSLContext, web_context: ssl.SSLContext | None = None):
        settings = config["console"]
        host, port = listen_address(settings["proxy_listen"])
        self.address_family = socket.AF_INET6 if ":" in host else socket.AF_INET
        self.store = store
        self.relay_context = context
        self.web_context = web_context
        self.web_dir = settings["web_dir"]
        self.allowed_origins = list(settings["allowed_origins"])
        self.slots = threading.BoundedSemaphore(MAX_CONNECTIONS)
        super().__init__((host, port), handler_class())

    def process_request(self, request: Any, client_address: Any) -> None:
        if not self.slots.acquire(blocking=False):
            LOG.warning("%s: refused, %d connections served already", client_address[0],
                        MAX_CONNECTIONS)
            self.shutdown_request(request)
            return
        super().process_request(request, client_address)

    def process_request_thread(self, request: Any, client_address: Any) -> None:
        try:
            super().process_request_thread(request, client_address)
        finally:
            self.slots.release()

    def finish_request(self, request: Any, client_address: Any) -> None:
        if self.web_context is not None:
            request.settimeout(REQUEST_SECONDS)
            request = self.web_context.wrap_socket(request, server_side=True)
        super().finish_request(request, client_address)

    def handle_error(self, request: Any, client_address: Any) -> None:
        import sys

        error = sys.exc_info()[1]
        if isinstance(error, self.Refusal):
            return  # logged, and answered, where refused
        LOG.warning("%s: connection ended: %s: %s", client_address[0],
                    type(error).__name__, str(error).splitlines()[0][:200] if str(error) else "")


def web_context(settings: dict[str, Any]) -> ssl.SSLContext | None:
    if bool(settings["web_cert"]) != bool(settings["web_key"]):
        raise ConfigError("console.web_cert and console.web_key go together")
    if not settings["web_cert"]:
        return None
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    context.load_cert_chain(settings["web_cert"], settings["web_key"])
    return context


def serve(config: dict[str, Any]) -> int:
    """Run the proxy until SIGTERM or SIGINT."""
    from etcd_compute.etcd import Store

    settings = config["console"]
    if not Path(settings["web_dir"], "vnc_lite.html").is_file():
        raise ConfigError(f"console.web_dir {settings['web_dir']}: no noVNC there "
                          "(vnc_lite.html; Debian's novnc package)")
    context = relay_context(settings, config["etcd"]["ca_cert"])
    store = Store(config["etcd"])
    server = ProxyServer(config, store, context, web_context(settings))
    stopping = threading.Event()

    def stop(*_: object) -> None:
        if not stopping.is_set():
            stopping.set()
            threading.Thread(target=server.shutdown, daemon=True).start()

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    host, port = server.server_address[:2]
    LOG.warning("console proxy serving noVNC on %s:%d", host, port)
    try:
        server.serve_forever(poll_interval=0.5)
    finally:
        server.server_close()
        store.close()
    return 0

"""The metadata server process: HTTP on 169.254.169.254:80 for the guests of this host.

It serves EC2-style paths (/latest/meta-data/..., /latest/user-data) and
OpenStack's /openstack/latest/meta_data.json (`content.py`; the addresses in meta-data:
`addresses.py`), and takes the guest's password (`password.py`). Each guest gets
only its own data; any other source gets 404. Who is asking is known one of two
ways (mdserver.conf `mode`): `lease`, a guest on the libvirt NAT network by its
source address (`resolver.py`); `signed`, Neutron's metadata agent asking for a
guest, by the instance id it signs with the shared secret (`signed.py`: a request
without a good signature gets 403).

Guests are untrusted clients, so the HTTP server is waitress, not http.server:
a fixed number of worker threads (`threads`), an idle connection closed after
`idle_timeout_seconds`, request headers and bodies bounded (mdserver.conf). Idle
connections cost no thread, only a descriptor. Waitress bounds connections for the
whole server alone (`connection_limit`, after which it stops accepting), so one guest
could take them all; `admission.py` adds what it lacks, per-source accounting,
through waitress's own hook for accepted connections: a guest over
`connections_per_guest` has its extra connections closed at once. connection_limit
is then sized for many guests at their cap (polled, not select()ed: select stops
at descriptor 1024), and the open-files limit raised to match.

While it runs it keeps 169.254.169.254/32 on the network's bridge (added when
the network is up, re-added if the network is restarted, removed when the
server stops). The socket is bound with IP_FREEBIND, so the server can start
before the address exists; waitress serves that already-bound socket.
"""

from __future__ import annotations

import argparse
import logging
import os
import re
import resource
import signal
import socket
import sys
import threading
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

import libvirt
import waitress

from etcd_compute.config import load_compute
from etcd_compute.errors import ConfigError
from etcd_compute.mdserver import password
from etcd_compute.mdserver.addresses import PublicAddresses
from etcd_compute.mdserver.admission import PerSourceAdmission, SourceCounts
from etcd_compute.mdserver.content import VERSION, render
from etcd_compute.mdserver.password import PasswordRefused
from etcd_compute.mdserver.resolver import InstanceResolver
from etcd_compute.mdserver.settings import MdserverConfig, load_config
from etcd_compute.mdserver.signed import Forbidden, SignedResolver, read_secret
from etcd_compute.neutron import NeutronClient
from etcd_compute.virt import network
from etcd_compute.virt.instance_files import InstanceFiles

log = logging.getLogger("etcd_compute.mdserver")

IP_FREEBIND = getattr(socket, "IP_FREEBIND", 15)
ADDRESS_CHECK_SECONDS = 2.0
# Descriptors besides the connections: the listening socket, waitress's trigger,
# libvirt's connection, the log file, and some slack.
SPARE_FILES = 64
StartResponse = Callable[[str, list[tuple[str, str]]], Any]
PASSWORD_PATH = re.compile(r"openstack/" + VERSION + r"/password/?")
ADDRESS_PATHS = ("/meta-data/local-ipv4", "/meta-data/public-ipv4")


class MetadataApp:
    """The WSGI application: the asking guest's own data, or 404 (403 for a signed request
    without a good signature). GET and HEAD, and POST of the guest's password
    (password.py); any other method 405."""

    def __init__(self, resolver: InstanceResolver | SignedResolver,
                 addresses: PublicAddresses | None = None):
        self.resolver = resolver
        self.addresses = addresses or PublicAddresses(None)

    def __call__(self, environ: dict[str, Any], start_response: StartResponse) -> Iterable[bytes]:
        source = environ.get("REMOTE_ADDR", "")
        path = environ.get("PATH_INFO", "")
        method = environ.get("REQUEST_METHOD")
        is_password = PASSWORD_PATH.fullmatch(path.lstrip("/")) is not None
        if method not in ("GET", "HEAD") and not (method == "POST" and is_password):
            status, content_type, body = "405 Method Not Allowed", "text/plain", b""
        else:
            try:
                meta = self.resolver.meta_for_request(environ)
                answer = self.answer(environ, path, meta, is_password) if meta else None
            except Forbidden:
                status, answer = Forbidden.status, None
            except PasswordRefused as refused:
                status, answer = refused.status, ("text/plain", f"{refused}\n".encode())
            else:
                status = "404 Not Found" if answer is None else "200 OK"
            content_type, body = answer or ("text/plain", b"")
        if isinstance(self.resolver, SignedResolver) and "HTTP_X_FORWARDED_FOR" in environ:
            # the guest the agent asks for, as the agent says
            source += f" for {environ['HTTP_X_FORWARDED_FOR'][:64]!r}"
        log.info("%s %s %r %s", source, method, path[:200], status[:3])
        start_response(status, [("Content-Type", content_type),
                                ("Content-Length", str(len(body)))])
        return [body] if method != "HEAD" else []

    def answer(self, environ: dict[str, Any], path: str, meta: dict[str, Any],
               is_password: bool) -> tuple[str, bytes] | None:
        """(content type, body) for the instance of `meta`, None when there is no such path
        (PasswordRefused for a password POST not taken)."""
        if is_password:
            files = InstanceFiles.of(self.resolver.config.instances_dir, meta["uuid"])
            if environ.get("REQUEST_METHOD") == "POST":
                if not password.accept(files, read_body(environ, password.MAX_SIZE)):
                    log.warning("instance %s: its password is kept but the compute did not "
                                "publish it within %.0f s", meta["uuid"],
                                password.PUBLISH_WAIT_SECONDS)
                return "text/plain", b""
            return "text/plain; charset=utf-8", password.current(files).encode()
        if path.rstrip("/").endswith(ADDRESS_PATHS):
            local = self.resolver.address_for_request(environ)
            meta = {**meta, "local_ipv4": local}
            if path.rstrip("/").endswith("/public-ipv4"):
                meta["public_ipv4"] = self.addresses.public_ipv4(meta["uuid"], local)
        return render(path, meta)


def read_body(environ: dict[str, Any], limit: int) -> bytes:
    """At most `limit` + 1 bytes of the request's body (one more tells it is too long)."""
    try:
        length = max(0, int(environ.get("CONTENT_LENGTH") or 0))
    except ValueError:
        length = 0
    return environ["wsgi.input"].read(min(length, limit + 1)) if length else b""


def public_addresses(config: MdserverConfig) -> PublicAddresses:
    """public-ipv4 from Neutron with the credential of `compute_config` (none: "")."""
    if not config.compute_config:
        return PublicAddresses(None)
    neutron = load_compute(config.compute_config)["network"]["neutron"]
    if not neutron.get("keystone"):
        raise ConfigError(f"mdserver.compute_config {config.compute_config}: its "
                          "network.neutron.keystone is not set (public-ipv4 asks Neutron)")
    return PublicAddresses(lambda: NeutronClient(neutron))


def listening_socket(config: MdserverConfig) -> socket.socket:
    """The server's socket, bound with IP_FREEBIND (the address may not exist yet)."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.setsockopt(socket.SOL_IP, IP_FREEBIND, 1)
    sock.bind((config.bind_address, config.port))
    return sock


def resolver_for(config: MdserverConfig) -> InstanceResolver | SignedResolver:
    """Who is asking, in the config's mode (ConfigError for an unusable secret file)."""
    if config.mode == "signed":
        return SignedResolver(config, read_secret(config.shared_secret_file))
    return InstanceResolver(config)


def create_server(config: MdserverConfig, sock: socket.socket,
                  resolver: InstanceResolver | SignedResolver | None = None,
                  addresses: PublicAddresses | None = None) -> Any:
    """A waitress server for `sock` with mdserver.conf's limits; in lease mode each guest
    held to its share of them (in signed mode every connection is the agent's, and each
    network's haproxy bounds its guests)."""
    server = waitress.create_server(
        MetadataApp(resolver or resolver_for(config), addresses),
        sockets=[sock],
        threads=config.threads,
        connection_limit=config.connection_limit,
        # select() cannot watch descriptors past 1024; poll() can.
        asyncore_use_poll=True,
        channel_timeout=config.idle_timeout_seconds,
        # Idle connections are looked for this often (waitress's default is 30 s).
        cleanup_interval=max(1, config.idle_timeout_seconds // 2),
        max_request_header_size=config.max_request_header_bytes,
        max_request_body_size=config.max_request_body_bytes,
        ident="etcd-compute-mdserver",
        expose_tracebacks=False,
        # Waitress drops X-Forwarded-For from a proxy it does not trust; in signed mode the
        # agent's names the guest (local-ipv4; nothing else rests on it), in lease mode a
        # guest's own would be a lie.
        clear_untrusted_proxy_headers=config.mode != "signed",
    )
    if config.mode == "lease":
        PerSourceAdmission(SourceCounts(config.connections_per_guest)).install(server)
    return server


def raise_open_files_limit(config: MdserverConfig) -> None:
    """Let this process hold connection_limit connections: raise its soft limit on open
    files (to no more than the hard limit); ConfigError if the hard limit is too low."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    needed = config.connection_limit + SPARE_FILES
    if soft != resource.RLIM_INFINITY and soft < needed:
        if hard != resource.RLIM_INFINITY and hard < needed:
            raise ConfigError(
                f"mdserver.connection_limit {config.connection_limit} needs {needed} open "
                f"files but this process may open {hard} (raise its hard limit, "
                "e.g. LimitNOFILE=, or lower connection_limit)")
        resource.setrlimit(resource.RLIMIT_NOFILE, (needed, hard))


# -- the address on the bridge ---------------------------------------------------------


class MetadataAddressKeeper(threading.Thread):
    """Keeps 169.254.169.254/32 on the network's bridge while the network runs."""

    def __init__(self, config: MdserverConfig):
        super().__init__(name="metadata-address", daemon=True)
        self.config = config
        self.stopping = threading.Event()
        self.bridge: str | None = None

    def _active_bridge(self) -> str | None:
        connection = libvirt.open(self.config.libvirt_uri)
        try:
            net = connection.networkLookupByName(self.config.network)
            return net.bridgeName() if net.isActive() else None
        finally:
            connection.close()

    def check(self) -> None:
        try:
            bridge = self._active_bridge()
        except libvirt.libvirtError:
            bridge = None  # network not defined yet, or libvirtd restarting
        if bridge and not network.has_metadata_address(bridge):
            log.info("adding %s to %s", network.METADATA_ADDRESS, bridge)
            network.add_metadata_address(bridge)
        self.bridge = bridge

    def run(self) -> None:
        while not self.stopping.wait(ADDRESS_CHECK_SECONDS):
            try:
                self.check()
            except OSError as exc:
                log.warning("%s", exc)

    def remove(self) -> None:
        if self.bridge:
            log.info("removing %s from %s", network.METADATA_ADDRESS, self.bridge)
            network.remove_metadata_address(self.bridge)


def serve(config: MdserverConfig, pid_file: Path | None = None,
          resolver: InstanceResolver | SignedResolver | None = None,
          addresses: PublicAddresses | None = None) -> None:
    """Run until SIGTERM or SIGINT."""
    sock = listening_socket(config)
    server = create_server(config, sock, resolver, addresses)
    keeper = None
    if config.bind_address == network.METADATA_ADDRESS:
        keeper = MetadataAddressKeeper(config)
        keeper.check()
        keeper.start()
    if pid_file:
        pid_file.write_text(f"{os.getpid()}\n")  # written once listening: a ready signal

    def stop(_signum: int, _frame: object) -> None:
        raise SystemExit  # waitress's loop stops on it and shuts its threads down

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    log.info("listening on %s:%d in %s mode (%d threads, at most %d connections per guest "
             "and %d in all, idle timeout %d s)", config.bind_address, config.port,
             config.mode, config.threads,
             config.connections_per_guest, config.connection_limit,
             config.idle_timeout_seconds)
    try:
        server.run()
    finally:
        server.close()
        sock.close()
        if keeper:
            keeper.stopping.set()
            keeper.remove()
        if pid_file:
            pid_file.unlink(missing_ok=True)
        log.info("stopped")


def build_parser() -> argparse.ArgumentParser:
    """The metadata server's parser (docs/reference/cli.md is generated from it)."""
    parser = argparse.ArgumentParser(prog="python -m etcd_compute.mdserver", description=__doc__)
    parser.add_argument("--config", default="mdserver.conf", help="INI file (see mdserver.conf)")
    parser.add_argument("--pid-file", type=Path, help="written once listening, removed at exit")
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        config = load_config(args.config)
        raise_open_files_limit(config)
        resolver = resolver_for(config)  # the secret read once, before listening
        addresses = public_addresses(config)
    except ConfigError as exc:
        print(exc, file=sys.stderr)
        return exc.exit_code
    handler: logging.Handler = (
        logging.FileHandler(config.log_file) if config.log_file else logging.StreamHandler()
    )
    logging.basicConfig(
        level=logging.INFO,
        handlers=[handler],
        format="%(asctime)s mdserver[%(process)d] %(levelname)s %(message)s",
    )
    try:
        serve(config, args.pid_file, resolver, addresses)
    except OSError as exc:
        log.error("cannot serve on %s:%d: %s", config.bind_address, config.port, exc)
        return 3
    return 0

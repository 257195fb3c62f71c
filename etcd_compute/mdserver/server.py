"""The metadata server process: HTTP on 169.254.169.254:80 for the guests of this host.

It serves EC2-style paths (/latest/meta-data/..., /latest/user-data) and
OpenStack's /openstack/latest/meta_data.json (`content.py`). Each guest gets
only its own data (`resolver.py`); any other source gets 404.

While it runs it keeps 169.254.169.254/32 on the network's bridge (added when
the network is up, re-added if the network is restarted, removed when the
server stops). The socket is bound with IP_FREEBIND, so the server can start
before the address exists.
"""

from __future__ import annotations

import argparse
import logging
import os
import signal
import socket
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import libvirt

from etcd_compute.errors import ConfigError
from etcd_compute.mdserver.content import render
from etcd_compute.mdserver.resolver import InstanceResolver
from etcd_compute.mdserver.settings import MdserverConfig, load_config
from etcd_compute.virt import network

log = logging.getLogger("etcd_compute.mdserver")

IP_FREEBIND = getattr(socket, "IP_FREEBIND", 15)
ADDRESS_CHECK_SECONDS = 2.0


class MetadataHandler(BaseHTTPRequestHandler):
    server: MetadataHTTPServer
    server_version = "etcd-compute-mdserver"

    def do_GET(self) -> None:  # noqa: N802 (http.server's naming)
        source = self.client_address[0]
        meta = self.server.resolver.meta_for(source)
        answer = render(self.path.split("?", 1)[0], meta) if meta else None
        if answer is None:
            self.send_error(404)
            return
        content_type, body = answer
        self.send_response(200)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002
        log.info("%s %s", self.client_address[0], format % args)


class MetadataHTTPServer(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, config: MdserverConfig):
        self.resolver = InstanceResolver(config)
        super().__init__((config.bind_address, config.port), MetadataHandler)

    def server_bind(self) -> None:
        # Bind even while 169.254.169.254 is not (yet) on the bridge.
        self.socket.setsockopt(socket.SOL_IP, IP_FREEBIND, 1)
        super().server_bind()


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


def serve(config: MdserverConfig, pid_file: Path | None = None) -> None:
    """Run until SIGTERM or SIGINT."""
    server = MetadataHTTPServer(config)
    keeper = None
    if config.bind_address == network.METADATA_ADDRESS:
        keeper = MetadataAddressKeeper(config)
        keeper.check()
        keeper.start()
    if pid_file:
        pid_file.write_text(f"{os.getpid()}\n")  # written once listening: a ready signal

    def stop(_signum: int, _frame: object) -> None:
        threading.Thread(target=server.shutdown, daemon=True).start()

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    log.info("listening on %s:%d", config.bind_address, config.port)
    try:
        server.serve_forever(poll_interval=0.5)
    finally:
        server.server_close()
        if keeper:
            keeper.stopping.set()
            keeper.remove()
        if pid_file:
            pid_file.unlink(missing_ok=True)
        log.info("stopped")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m etcd_compute.mdserver", description=__doc__)
    parser.add_argument("--config", default="mdserver.conf", help="INI file (see mdserver.conf)")
    parser.add_argument("--pid-file", type=Path, help="written once listening, removed at exit")
    args = parser.parse_args(argv)
    try:
        config = load_config(args.config)
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
    libvirt.registerErrorHandler(lambda _context, _error: None, None)
    try:
        serve(config, args.pid_file)
    except OSError as exc:
        log.error("cannot serve on %s:%d: %s", config.bind_address, config.port, exc)
        return 3
    return 0

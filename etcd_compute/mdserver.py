"""The metadata server guests reach at http://169.254.169.254/.

    python -m etcd_compute.mdserver --config mdserver.conf [--pid-file PATH]

It serves EC2-style paths (/latest/meta-data/..., /latest/user-data) and
OpenStack's /openstack/latest/meta_data.json. Each guest gets only its own
data: the request's source address -> the current DHCP lease for it on our
network -> that lease's MAC -> the running domain of ours with that MAC ->
the instance's meta.json in instances_dir/<uuid>/. Any other source gets 404.

While it runs it keeps 169.254.169.254/32 on the network's bridge (added when
the network is up, re-added if the network is restarted, removed when the
server stops). The socket is bound with IP_FREEBIND, so the server can start
before the address exists.

The compute daemon calls `ensure_mdserver(config)` at start.
"""

from __future__ import annotations

import argparse
import configparser
import json
import logging
import os
import re
import signal
import socket
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import filelock
import libvirt
import psutil

from etcd_compute.errors import ConfigError, ServiceUnavailable
from etcd_compute.virt import network
from etcd_compute.virt.domain import is_ours, mac_addresses
from etcd_compute.virt.instance_files import InstanceFiles

log = logging.getLogger("etcd_compute.mdserver")

IP_FREEBIND = getattr(socket, "IP_FREEBIND", 15)
ADDRESS_CHECK_SECONDS = 2.0
START_TIMEOUT_SECONDS = 10.0
VERSION = r"(latest|\d{4}-\d{2}-\d{2})"


@dataclass(frozen=True)
class MdserverConfig:
    bind_address: str = network.METADATA_ADDRESS
    port: int = 80
    instances_dir: str = "/var/lib/etcd-compute/instances"
    libvirt_uri: str = "qemu:///system"
    network: str = "etcd-compute"
    log_file: str = ""


def load_config(path: str | os.PathLike[str]) -> MdserverConfig:
    """Read the [mdserver] section of an INI file (missing keys keep their defaults)."""
    parser = configparser.ConfigParser()
    try:
        with open(path) as handle:
            parser.read_file(handle)
    except (OSError, configparser.Error) as exc:
        raise ConfigError(f"{path}: cannot read: {str(exc).splitlines()[0]}") from None
    if not parser.has_section("mdserver"):
        raise ConfigError(f"{path}: no [mdserver] section")
    section = parser["mdserver"]
    known = set(MdserverConfig.__dataclass_fields__)
    unknown = sorted(set(section) - known)
    if unknown:
        raise ConfigError(f"{path}: unknown key 'mdserver.{unknown[0]}'")
    values: dict[str, Any] = dict(section)
    if "port" in values:
        try:
            values["port"] = int(values["port"])
        except ValueError:
            raise ConfigError(f"{path}: mdserver.port: not a number") from None
    return MdserverConfig(**values)


# -- who is asking ---------------------------------------------------------------------


class InstanceResolver:
    """Source address -> the meta.json of the instance that holds that address."""

    def __init__(self, config: MdserverConfig):
        self.config = config
        self._connection: libvirt.virConnect | None = None
        self._lock = threading.Lock()

    @property
    def connection(self) -> libvirt.virConnect:
        with self._lock:
            if self._connection is None or not self._connection.isAlive():
                self._connection = libvirt.open(self.config.libvirt_uri)
            return self._connection

    def meta_for(self, ip: str) -> dict[str, Any] | None:
        try:
            net = self.connection.networkLookupByName(self.config.network)
            macs = network.macs_for_ip(net, ip)
            if not macs:
                return None
            domains = self.connection.listAllDomains(libvirt.VIR_CONNECT_LIST_DOMAINS_ACTIVE)
            for mac in macs:  # newest lease first
                for domain in domains:
                    if is_ours(domain) and mac in mac_addresses(domain, self.config.network):
                        files = InstanceFiles.of(self.config.instances_dir, domain.name())
                        return files.read_meta()
        except libvirt.libvirtError as exc:
            log.warning("lookup of %s failed: %s", ip, exc.get_error_message())
        return None


# -- what is served --------------------------------------------------------------------


def render(path: str, meta: dict[str, Any]) -> tuple[str, bytes] | None:
    """(content type, body) for `path` of the instance described by `meta`, or None."""
    text = "text/plain; charset=utf-8"
    user_data = meta.get("user_data")
    ssh_key = meta.get("ssh_key")
    ec2 = re.fullmatch(VERSION + r"(/.*)?", path.lstrip("/"))
    openstack = re.fullmatch(r"openstack/" + VERSION + r"(/.*)?", path.lstrip("/"))

    def plain(body: str) -> tuple[str, bytes]:
        return text, body.encode()

    if path in ("", "/"):
        return plain("latest\n")
    if ec2:
        rest = (ec2.group(2) or "/").rstrip("/") or "/"
        if rest == "/":
            return plain("meta-data/\n" + ("user-data\n" if user_data is not None else ""))
        if rest == "/user-data":
            return plain(user_data) if user_data is not None else None
        entries = {
            "/meta-data/instance-id": meta["uuid"],
            "/meta-data/hostname": meta["hostname"],
            "/meta-data/local-hostname": meta["hostname"],
        }
        if rest in entries:
            return plain(entries[rest])
        if rest == "/meta-data":
            index = ["instance-id", "hostname", "local-hostname"]
            return plain("\n".join(index + (["public-keys/"] if ssh_key else [])) + "\n")
        if ssh_key:
            keys = {
                "/meta-data/public-keys": "0=key\n",
                "/meta-data/public-keys/0": "openssh-key\n",
                "/meta-data/public-keys/0/openssh-key": ssh_key.strip() + "\n",
            }
            if rest in keys:
                return plain(keys[rest])
        return None
    if path.rstrip("/") == "/openstack":
        return plain("latest\n")
    if openstack:
        rest = (openstack.group(2) or "/").rstrip("/") or "/"
        if rest == "/":
            return plain("meta_data.json\n" + ("user_data\n" if user_data is not None else ""))
        if rest == "/meta_data.json":
            document = {
                "uuid": meta["uuid"],
                "name": meta["name"],
                "hostname": meta["hostname"],
                "launch_index": 0,
                "public_keys": {"key": ssh_key.strip()} if ssh_key else {},
                "meta": {},
            }
            return "application/json", json.dumps(document).encode()
        if rest == "/user_data":
            return plain(user_data) if user_data is not None else None
    return None


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


# -- started by the compute daemon -----------------------------------------------------


def running_pid(pid_file: Path) -> int | None:
    """The pid in `pid_file` if that process is a live metadata server."""
    try:
        pid = int(pid_file.read_text().strip())
        return pid if "etcd_compute.mdserver" in " ".join(psutil.Process(pid).cmdline()) else None
    except (OSError, ValueError, psutil.Error):
        return None


def pid_file_for(config: dict[str, Any]) -> Path:
    """One server per host: computes sharing an instances dir share its pid file."""
    return Path(config["compute"]["instances_dir"]) / ".mdserver.pid"


def _package_root() -> str:
    """PYTHONPATH that finds this package even when it is not installed."""
    root = str(Path(__file__).resolve().parent.parent)
    existing = os.environ.get("PYTHONPATH")
    return f"{root}{os.pathsep}{existing}" if existing else root


def ensure_mdserver(config: dict[str, Any]) -> int | None:
    """Start the metadata server for this compute configuration unless it runs.

    Returns its pid, or None with libvirt's test driver (no guests to serve).
    Raises ConfigError if mdserver.conf disagrees with compute.yaml about where
    instances live, and ServiceUnavailable if the server does not come up.
    """
    settings = config["driver"]["libvirt"]
    if config["driver"]["name"] != "libvirt" or settings["uri"].startswith("test:"):
        return None
    conf_path = Path(settings["mdserver_config"]).resolve()
    md = load_config(conf_path)
    expected = {
        "instances_dir": os.path.abspath(config["compute"]["instances_dir"]),
        "libvirt_uri": settings["uri"],
        "network": settings["network"],
    }
    actual = {**vars(md), "instances_dir": os.path.abspath(md.instances_dir)}
    for key, value in expected.items():
        if actual[key] != value:
            raise ConfigError(
                f"{conf_path}: mdserver.{key} is {actual[key]!r} but compute.yaml has {value!r}"
            )
    pid_file = pid_file_for(config)
    pid_file.parent.mkdir(parents=True, exist_ok=True)
    with filelock.FileLock(str(pid_file.with_suffix(".lock"))):
        pid = running_pid(pid_file)
        if pid:
            return pid
        pid_file.unlink(missing_ok=True)
        holder = _listener(md.bind_address, md.port)
        if holder is not None:
            raise ServiceUnavailable(
                f"{md.bind_address}:{md.port} is already served by another metadata server "
                f"(pid {holder}); one runs per host: stop it, or give this compute the same "
                "instances_dir and mdserver.conf"
            )
        # setsid --fork: the server is re-parented to init and never becomes our zombie.
        subprocess.run(
            ["setsid", "--fork", sys.executable, "-m", "etcd_compute.mdserver",
             "--config", str(conf_path), "--pid-file", str(pid_file)],
            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
            check=True, env={**os.environ, "PYTHONPATH": _package_root()},
        )
        deadline = time.monotonic() + START_TIMEOUT_SECONDS
        while time.monotonic() < deadline:
            pid = running_pid(pid_file)
            if pid:
                log.info("metadata server started, pid %d", pid)
                return pid
            time.sleep(0.1)
    where = md.log_file or "its stderr (set log_file in mdserver.conf)"
    raise ServiceUnavailable(f"metadata server did not start; see {where}")


def _listener(address: str, port: int) -> int | None:
    """Pid of the process listening on address:port, if any."""
    for connection in psutil.net_connections(kind="tcp"):
        if (connection.status == psutil.CONN_LISTEN and connection.laddr
                and connection.laddr.ip == address and connection.laddr.port == port):
            return connection.pid or -1
    return None


def stop_mdserver(config: dict[str, Any], timeout: float = 10.0) -> None:
    """Stop the metadata server started by `ensure_mdserver` (by its pid)."""
    pid = running_pid(pid_file_for(config))
    if pid is None:
        return
    process = psutil.Process(pid)
    process.terminate()
    try:
        process.wait(timeout)
    except psutil.TimeoutExpired:
        process.kill()


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


if __name__ == "__main__":
    sys.exit(main())

"""Started by the compute daemon: one metadata server per host, found by its pid file.

`ensure_mdserver(config)` starts `python -m etcd_compute.mdserver` (detached,
so it outlives the compute: its guests still need it) unless it runs;
`stop_mdserver(config)` stops it by pid.
"""

from __future__ import annotations

import contextlib
import logging
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import filelock
import psutil

from etcd_compute.errors import ConfigError, ServiceUnavailable
from etcd_compute.mdserver.settings import load_config
from etcd_compute.network_backend import backend_of, uses_neutron

log = logging.getLogger("etcd_compute.mdserver")

START_TIMEOUT_SECONDS = 10.0


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


def mode_for(config: dict[str, Any]) -> str:
    """The server's mode for this compute's network backend: `signed` under Neutron (its
    metadata agent asks for the guests), `lease` on the libvirt NAT network."""
    return "signed" if uses_neutron(config) else "lease"


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
    # mdserver.conf key -> (compute.yaml's value, its key there)
    expected = {
        # Guests on Neutron reach the server only through Neutron's metadata agent, which
        # signs; guests on the NAT network ask it themselves, known by their leases.
        "mode": (mode_for(config), "network.backend " + backend_of(config)),
        "instances_dir": (os.path.abspath(config["compute"]["instances_dir"]),
                          "compute.instances_dir"),
        "libvirt_uri": (settings["uri"], "driver.libvirt.uri"),
    }
    if mode_for(config) == "lease":
        expected.update({
            "network": (settings["network"], "driver.libvirt.network"),
            # The server's cap per guest and the guest filter's: one number, kept in both.
            "connections_per_guest": (settings["metadata_connections_per_guest"],
                                      "driver.libvirt.metadata_connections_per_guest"),
        })
    actual = {**vars(md), "instances_dir": os.path.abspath(md.instances_dir)}
    for key, (value, name) in expected.items():
        if actual[key] != value:
            raise ConfigError(f"{conf_path}: mdserver.{key} is {actual[key]!r} but "
                              f"compute.yaml has {value!r} ({name})")
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
    deadline = time.monotonic() + timeout
    while not exited(process):
        if time.monotonic() > deadline:
            with contextlib.suppress(psutil.NoSuchProcess):
                process.kill()
            return
        time.sleep(0.02)


def exited(process: psutil.Process) -> bool:
    """Gone, or a zombie: the server is detached, so its parent is init, which may reap it
    late (this machine's init took 1.5-2 s; psutil's wait() waited for the reaping)."""
    try:
        return process.status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True

"""Child processes we start and stop by pid, and the little helpers around them."""

from __future__ import annotations

import contextlib
import fcntl
import os
import signal
import socket
import subprocess
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import requests

from etcd_compute.errors import ServiceUnavailable

REPO = Path(__file__).resolve().parents[2]
PLACEMENT_VENV = Path(os.environ.get("PLACEMENT_VENV", REPO / ".venv-placement"))
KEYSTONE_VENV = Path(os.environ.get("KEYSTONE_VENV", REPO / ".venv-keystone"))
GLANCE_VENV = Path(os.environ.get("GLANCE_VENV", REPO / ".venv-glance"))
NEUTRON_VENV = Path(os.environ.get("NEUTRON_VENV", REPO / ".venv-neutron"))
HORIZON_VENV = Path(os.environ.get("HORIZON_VENV", REPO / ".venv-horizon"))
# The `openstack` command line (python-openstackclient), in a virtualenv of its own.
CLIENTS_VENV = Path(os.environ.get("CLIENTS_VENV", REPO / ".venv-clients"))


@contextlib.contextmanager
def host_lock(name: str, timeout: float = 1800.0) -> Iterator[None]:
    """Hold a machine-wide lock (for what only one user of this machine may hold at a time:
    the metadata server's 169.254.169.254:80 and the guests that need it)."""
    path = Path("/run/lock") / f"etcd-compute-{name}.lock"
    with open(path, "a") as handle:
        deadline = time.monotonic() + timeout
        while True:
            try:
                fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() > deadline:
                    raise ServiceUnavailable(
                        f"{path} held by another run for {timeout:.0f} s") from None
                time.sleep(0.5)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def free_port() -> int:
    """A TCP port on loopback that nobody listens on right now."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def port_open(port: int, host: str = "127.0.0.1") -> bool:
    with socket.socket() as sock:
        sock.settimeout(0.5)
        return sock.connect_ex((host, port)) == 0


def pid_alive(pid: int | None) -> bool:
    if not pid:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    # A zombie child still answers kill(0); treat it as gone.
    with contextlib.suppress(OSError):
        if Path(f"/proc/{pid}/stat").read_text().split(") ")[1].startswith("Z"):
            return False
    return True


def stop_pid(pid: int | None, timeout: float = 10.0) -> None:
    """SIGTERM, wait, then SIGKILL: the process (group) is gone when this returns."""
    stop_pids([pid], timeout)


def stop_pids(pids: Iterable[int | None], timeout: float = 10.0) -> None:
    """`stop_pid` for several processes side by side (each daemon may take a second to
    shut down: one after another, a VM test's three computes took 3 s)."""
    running = [pid for pid in pids if pid and pid_alive(pid)]
    for pid in running:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + timeout
    while running and time.monotonic() < deadline:
        for pid in running:
            with contextlib.suppress(ChildProcessError):
                os.waitpid(pid, os.WNOHANG)
        running = [pid for pid in running if pid_alive(pid)]
        if running:
            time.sleep(0.05)
    for pid in running:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
        with contextlib.suppress(ChildProcessError):
            os.waitpid(pid, 0)


def wait_until(check: Callable[[], bool], timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if check():
            return
        time.sleep(0.1)
    raise ServiceUnavailable(f"{what} did not become ready within {timeout:.0f} s")


# What a server's log says when its port was bound by someone else first: etcd, gunicorn
# (it tries 5 times, a second apart, then gives up).
PORT_TAKEN = ("address already in use", "connection in use", "can't connect to")


@dataclass
class Service:
    """A child process we started; `pid` is what we stop it by."""

    name: str
    run_dir: Path
    port: int
    pid: int | None = None
    extra: dict[str, str] = field(default_factory=dict)

    @property
    def log_path(self) -> Path:
        return self.run_dir / f"{self.name}.log"

    def _spawn(self, argv: list[str], env: dict[str, str] | None = None,
               cwd: Path | None = None) -> None:
        self.run_dir.mkdir(parents=True, exist_ok=True)
        with open(self.log_path, "ab") as log:
            process = subprocess.Popen(
                argv,
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                env={**os.environ, **(env or {})},
                cwd=cwd,
                # Own session: a Ctrl-C in the terminal reaches us, not the services.
                start_new_session=True,
            )
        self.pid = process.pid

    def _fail(self, message: str) -> ServiceUnavailable:
        tail = ""
        with contextlib.suppress(OSError):
            lines = self.log_path.read_text(errors="replace").strip().splitlines()
            tail = f" (last log line: {lines[-1][:200]})" if lines else ""
        self.stop()
        return ServiceUnavailable(f"{message}; see {self.log_path}{tail}")

    def running(self) -> bool:
        return pid_alive(self.pid)

    def _wait_healthy(self, url: str, timeout: float, verify: str | bool = True,
                      cert: tuple[str, str] | None = None) -> None:
        """Wait until `url` answers 2xx; stop the process and raise if it never does."""

        def healthy() -> bool:
            if not self.running():
                raise self._fail(f"{self.name} exited at start")
            try:
                return requests.get(url, timeout=2, verify=verify, cert=cert).ok
            except requests.RequestException:
                return False

        try:
            wait_until(healthy, timeout, self.name)
        except ServiceUnavailable as exc:
            raise self._fail(str(exc)) from None

    def start_on_a_free_port(self, start_once: Callable[[], None], attempts: int = 3,
                             moved: Callable[[], None] | None = None) -> None:
        """`start_once()` (spawn, then wait until healthy), again on another port (after
        `moved()`) while this attempt's log says its port was taken: free_port() only says a
        port was free a moment ago, and another worker's service may have bound it since
        (seen in make test: an etcd, a Keystone)."""
        for attempt in range(attempts):
            logged = self.log_path.stat().st_size if self.log_path.exists() else 0
            try:
                start_once()
                return
            except ServiceUnavailable:
                with open(self.log_path, "rb") as log:
                    log.seek(logged)
                    said = log.read().decode(errors="replace").lower()
                if attempt == attempts - 1 or not any(words in said for words in PORT_TAKEN):
                    raise
                self.port = free_port()
                if moved is not None:
                    moved()

    def stop(self) -> None:
        stop_pid(self.pid)
        self.pid = None

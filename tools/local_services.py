"""Local etcd, Placement, PostgreSQL and libvirtd for the demo, `make up` and the tests.

Each service is a plain child process with its data under a run directory,
started on the ports it is given (random free ones in tests) and stopped by
pid. Nothing here is needed in production, where etcd and Placement are
real deployments (an etcd cluster; Placement on PostgreSQL or MySQL).

    python -m tools.local_services up [--run-dir run]
    python -m tools.local_services down [--run-dir run]
    python -m tools.local_services status [--run-dir run]
"""

from __future__ import annotations

import argparse
import contextlib
import fcntl
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path

import requests

from etcd_compute.errors import ServiceUnavailable

REPO = Path(__file__).resolve().parent.parent
PLACEMENT_VENV = Path(os.environ.get("PLACEMENT_VENV", REPO / ".venv-placement"))
POSTGRES_BIN = Path("/usr/lib/postgresql/15/bin")


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
    if not pid_alive(pid):
        return
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        with contextlib.suppress(ChildProcessError):
            os.waitpid(pid, os.WNOHANG)
        if not pid_alive(pid):
            return
        time.sleep(0.05)
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

    def _spawn(self, argv: list[str], env: dict[str, str] | None = None) -> None:
        self.run_dir.mkdir(parents=True, exist_ok=True)
        with open(self.log_path, "ab") as log:
            process = subprocess.Popen(
                argv,
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                env={**os.environ, **(env or {})},
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

    def _wait_healthy(self, url: str, timeout: float) -> None:
        """Wait until `url` answers 2xx; stop the process and raise if it never does."""

        def healthy() -> bool:
            if not self.running():
                raise self._fail(f"{self.name} exited at start")
            try:
                return requests.get(url, timeout=2).ok
            except requests.RequestException:
                return False

        try:
            wait_until(healthy, timeout, self.name)
        except ServiceUnavailable as exc:
            raise self._fail(str(exc)) from None

    def stop(self) -> None:
        stop_pid(self.pid)
        self.pid = None


class EtcdServer(Service):
    """etcd 3.4 from Debian as a plain process, data dir under run_dir."""

    @classmethod
    def create(cls, run_dir: Path, port: int | None = None) -> EtcdServer:
        return cls("etcd", run_dir, port or free_port(), extra={"peer_port": str(free_port())})

    @property
    def endpoint(self) -> str:
        return f"127.0.0.1:{self.port}"

    def start(self) -> EtcdServer:
        if shutil.which("etcd") is None:
            raise ServiceUnavailable("etcd is not installed; run: make install")
        client_url = f"http://127.0.0.1:{self.port}"
        peer_url = f"http://127.0.0.1:{self.extra['peer_port']}"
        self._spawn(
            [
                "etcd",
                "--name", "local",
                "--data-dir", str(self.run_dir / "etcd-data"),
                "--listen-client-urls", client_url,
                "--advertise-client-urls", client_url,
                "--listen-peer-urls", peer_url,
                "--initial-advertise-peer-urls", peer_url,
                "--initial-cluster", f"local={peer_url}",
                # Keep history bounded the way an operator would.
                "--auto-compaction-retention", "1",
                # One scheduler request is one transaction (2 ops per instance);
                # the default of 128 caps --count at 42. Match scheduler.etcd_max_txn_ops.
                "--max-txn-ops", "4096",
                "--log-level", "warn",
            ]
        )
        self._wait_healthy(f"http://{self.endpoint}/health", 20)
        return self


class PostgresServer(Service):
    """A throwaway PostgreSQL cluster (Debian's binaries) for multi-worker Placement."""

    @classmethod
    def create(cls, run_dir: Path, port: int | None = None) -> PostgresServer:
        return cls("postgres", run_dir, port or free_port())

    @property
    def url(self) -> str:
        return f"postgresql+psycopg2://placement:placement@127.0.0.1:{self.port}/placement"

    def _as_postgres(self, argv: list[str]) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            ["runuser", "-u", "postgres", "--", *argv],
            capture_output=True, text=True, check=False,
        )

    def start(self) -> PostgresServer:
        if not (POSTGRES_BIN / "postgres").exists():
            raise ServiceUnavailable("PostgreSQL is not installed; run: make install")
        # The postgres user must reach its data dir; pytest's and mkdtemp's dirs are
        # root-only, so the cluster lives in a world-traversable dir of its own.
        self.run_dir.mkdir(parents=True, exist_ok=True)
        if "data_dir" not in self.extra:
            self.extra["data_dir"] = tempfile.mkdtemp(prefix="etcd-compute-pg-")
        home = Path(self.extra["data_dir"])
        home.chmod(0o755)
        shutil.chown(home, "postgres")
        data = home / "data"
        if not data.exists():
            result = self._as_postgres(
                [str(POSTGRES_BIN / "initdb"), "-D", str(data), "-A", "trust", "-U", "postgres"]
            )
            if result.returncode:
                raise ServiceUnavailable(f"initdb failed: {result.stderr.strip()[-200:]}")
        self._spawn(
            [
                "runuser", "-u", "postgres", "--",
                str(POSTGRES_BIN / "postgres"), "-D", str(data),
                "-p", str(self.port), "-k", str(home), "-h", "127.0.0.1",
                "-c", "max_connections=200", "-c", "fsync=off",
            ]
        )
        wait_until(lambda: port_open(self.port), 30, "PostgreSQL")
        base = ["psql", "-h", "127.0.0.1", "-p", str(self.port), "-U", "postgres", "-q", "-c"]
        for statement in (
            "CREATE ROLE placement LOGIN PASSWORD 'placement'",
            "CREATE DATABASE placement OWNER placement",
        ):
            self._as_postgres([*base, statement])
        return self

    def stop(self) -> None:
        super().stop()
        if "data_dir" in self.extra:
            shutil.rmtree(self.extra.pop("data_dir"), ignore_errors=True)


class PlacementServer(Service):
    """OpenStack Placement under gunicorn, noauth2, in its own virtualenv.

    `allocation_conflict_retry_count = 1`: with the default of 10 and several
    workers, two racing claims for the last unit both succeeded in over half
    of the trials measured here. Our scheduler retries 409s itself.
    """

    @classmethod
    def create(
        cls, run_dir: Path, port: int | None = None, db_url: str | None = None, workers: int = 1
    ) -> PlacementServer:
        db_url = db_url or f"sqlite:///{run_dir / 'placement.sqlite'}"
        if db_url.startswith("sqlite") and workers != 1:
            raise ValueError("Placement on SQLite needs exactly one worker")
        return cls(
            "placement", run_dir, port or free_port(),
            extra={"db_url": db_url, "workers": str(workers)},
        )

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def config_dir(self) -> Path:
        return self.run_dir / "placement-conf"

    def _write_config(self) -> Path:
        self.config_dir.mkdir(parents=True, exist_ok=True)
        conf = self.config_dir / "placement.conf"
        conf.write_text(
            "[DEFAULT]\n"
            "debug = False\n"
            "[api]\n"
            "auth_strategy = noauth2\n"
            "[placement]\n"
            "allocation_conflict_retry_count = 1\n"
            # Otherwise `limit` always returns the same first hosts to every scheduler.
            "randomize_allocation_candidates = True\n"
            "[placement_database]\n"
            f"connection = {self.extra['db_url']}\n"
        )
        return conf

    def start(self) -> PlacementServer:
        gunicorn = PLACEMENT_VENV / "bin" / "gunicorn"
        manage = PLACEMENT_VENV / "bin" / "placement-manage"
        if not gunicorn.exists() or not manage.exists():
            raise ServiceUnavailable(f"Placement is not installed in {PLACEMENT_VENV}; "
                                     "run: make install")
        conf = self._write_config()
        sync = subprocess.run(
            [str(manage), "--config-file", str(conf), "db", "sync"],
            capture_output=True, text=True, check=False,
        )
        if sync.returncode:
            lines = (sync.stderr or sync.stdout).strip().splitlines() or ["(no output)"]
            raise ServiceUnavailable(f"placement-manage db sync failed: {lines[-1][:200]}")
        self._spawn(
            [
                str(gunicorn),
                "--workers", self.extra["workers"],
                "--bind", f"127.0.0.1:{self.port}",
                "--no-control-socket",
                "--timeout", "120",
                "placement.wsgi.api:application",
            ],
            env={"OS_PLACEMENT_CONFIG_DIR": str(self.config_dir)},
        )
        self._wait_healthy(self.endpoint + "/", 60)
        return self


def libvirtd_usable(uri: str = "qemu:///system") -> bool:
    try:
        import libvirt
    except ImportError:
        return False
    try:
        libvirt.registerErrorHandler(lambda *_: None, None)
        conn = libvirt.open(uri)
    except libvirt.libvirtError:
        return False
    conn.close()
    return True


def ensure_libvirtd(run_dir: Path) -> list[int]:
    """Start libvirtd (and virtlogd, which writes console logs) if qemu:///system is silent.

    Returns the pids of the daemons we started, to stop later; none if libvirtd was running.
    """
    if libvirtd_usable():
        return []
    if shutil.which("libvirtd") is None:
        raise ServiceUnavailable("libvirtd is not installed; run: make install")
    run_dir.mkdir(parents=True, exist_ok=True)
    daemons = [("libvirtd", run_dir / "libvirtd.pid")]
    if shutil.which("virtlogd") and not Path("/run/libvirt/virtlogd-sock").exists():
        daemons.insert(0, ("virtlogd", run_dir / "virtlogd.pid"))
    for daemon, pidfile in daemons:
        subprocess.run([daemon, "-d", "--pid-file", str(pidfile)], check=False)
    wait_until(libvirtd_usable, 30, "libvirtd")
    return [int(pidfile.read_text().strip()) for _, pidfile in daemons if pidfile.exists()]


# --- `make up` / `make down`: a state file remembers what we started -------------


@dataclass
class LocalStack:
    run_dir: Path
    etcd: dict | None = None
    placement: dict | None = None
    # virtlogd and libvirtd, when we started them.
    libvirt_pids: list[int] = field(default_factory=list)

    @property
    def state_file(self) -> Path:
        return self.run_dir / "services.json"

    @classmethod
    def load(cls, run_dir: Path) -> LocalStack:
        stack = cls(run_dir)
        if stack.state_file.exists():
            saved = json.loads(stack.state_file.read_text())
            stack.etcd, stack.placement = saved.get("etcd"), saved.get("placement")
            stack.libvirt_pids = saved.get("libvirt_pids", [])
        return stack

    def save(self) -> None:
        self.run_dir.mkdir(parents=True, exist_ok=True)
        state = {"etcd": self.etcd, "placement": self.placement,
                 "libvirt_pids": self.libvirt_pids}
        self.state_file.write_text(json.dumps(state, indent=2))

    def up(self, etcd_port: int, placement_port: int, say: Callable[[str], None]) -> None:
        if self.etcd and pid_alive(self.etcd["pid"]):
            say(f"etcd already running (pid {self.etcd['pid']}, port {self.etcd['port']})")
        else:
            if port_open(etcd_port):
                raise ServiceUnavailable(
                    f"port {etcd_port} is taken by another process; stop it or pass --etcd-port")
            etcd = EtcdServer.create(self.run_dir, etcd_port)
            etcd.start()
            self.etcd = _service_state(etcd)
            self.save()
            say(f"etcd started (pid {etcd.pid}, 127.0.0.1:{etcd.port})")
        if self.placement and pid_alive(self.placement["pid"]):
            say(f"Placement already running (pid {self.placement['pid']}, "
                f"port {self.placement['port']})")
        else:
            if port_open(placement_port):
                raise ServiceUnavailable(f"port {placement_port} is taken by another process; "
                                         "stop it or pass --placement-port")
            placement = PlacementServer.create(self.run_dir, placement_port)
            placement.start()
            self.placement = _service_state(placement)
            self.save()
            say(f"Placement started (pid {placement.pid}, {placement.endpoint}, SQLite)")
        if any(pid_alive(pid) for pid in self.libvirt_pids):
            say(f"libvirtd already running (pids {self.libvirt_pids})")
        else:
            try:
                self.libvirt_pids = ensure_libvirtd(self.run_dir)
            except ServiceUnavailable as exc:
                say(f"libvirtd not available ({exc}); the fake driver still works")
            else:
                say("libvirtd started" if self.libvirt_pids else "libvirtd already running")
            self.save()

    def down(self, say: Callable[[str], None]) -> None:
        for name in ("placement", "etcd"):
            state = getattr(self, name)
            if state and pid_alive(state["pid"]):
                stop_pid(state["pid"])
                say(f"{name} stopped (pid {state['pid']})")
            setattr(self, name, None)
        for pid in reversed(self.libvirt_pids):  # libvirtd before virtlogd
            if pid_alive(pid):
                stop_pid(pid)
                say(f"stopped libvirt daemon (pid {pid})")
        self.libvirt_pids = []
        self.save()


def _service_state(service: Service) -> dict:
    state = asdict(service)
    state["run_dir"] = str(service.run_dir)
    return state


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("action", choices=["up", "down", "status"])
    parser.add_argument("--run-dir", default=str(REPO / "run"))
    parser.add_argument("--etcd-port", type=int, default=2379)
    parser.add_argument("--placement-port", type=int, default=8080)
    args = parser.parse_args(argv)
    stack = LocalStack.load(Path(args.run_dir).resolve())

    def say(line: str) -> None:
        print(f"==> {line}", flush=True)

    try:
        if args.action == "up":
            stack.up(args.etcd_port, args.placement_port, say)
        elif args.action == "down":
            stack.down(say)
        else:
            for name in ("etcd", "placement"):
                state = getattr(stack, name)
                alive = bool(state and pid_alive(state["pid"]))
                where = f"pid {state['pid']}, port {state['port']}" if state else "never started"
                print(f"{name}: {'running' if alive else 'stopped'} ({where})")
    except ServiceUnavailable as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""OVN's central services (Debian's `ovn-central` binaries, never its system services): the
northbound and southbound databases, each a standalone `ovsdb-server`, and `ovn-northd`
translating the first into the second.

Each database is made by `ovsdb-tool create` from Debian's schema and served on a unix
socket in the run directory and on 127.0.0.1, on a port the kernel picks (`ptcp:0`: the
server logs the port it got, so no other process can take it between our choice and its
bind). Every process runs in the foreground as our child, its control socket (`unixctl`) in
the run directory, and is stopped by its pid; OVS_RUNDIR and OVN_RUNDIR point there too, so
nothing lands in /var/run.
"""

from __future__ import annotations

import re
import shutil
from dataclasses import dataclass
from pathlib import Path

from etcd_compute.errors import ServiceUnavailable
from tools.local_services.ovs_tools import appctl, create_database, environment, run
from tools.local_services.process import Service, stop_pids, wait_until

SCHEMAS = Path("/usr/share/ovn")
# What ovsdb-server logs for a `ptcp:0:...` remote once it listens.
LISTENING = re.compile(r"0:127\.0\.0\.1: listening on port (\d+)")


def listening_on(address: str) -> re.Pattern[str]:
    """What ovsdb-server logs once a `ptcp:0:ADDRESS` remote listens: the port it got."""
    return re.compile(rf"0:{re.escape(address)}: listening on port (\d+)")


def _logged_since(service: Service, offset: int) -> str:
    try:
        with open(service.log_path, "rb") as log:
            log.seek(offset)
            return log.read().decode(errors="replace")
    except OSError:
        return ""


class OvsdbServer(Service):
    """One OVN database (`nb` or `sb`): its file, unix socket and TCP port on loopback."""

    @classmethod
    def create(cls, run_dir: Path, database: str) -> OvsdbServer:
        if database not in ("nb", "sb"):
            raise ValueError(f"OVN has the nb and sb databases, not {database!r}")
        # port 0 until it listens: the kernel picks it (`start`).
        return cls(f"ovsdb-{database}", run_dir, 0, extra={"database": database})

    @property
    def database(self) -> str:
        return self.extra["database"]

    @property
    def schema(self) -> Path:
        return SCHEMAS / f"ovn-{self.database}.ovsschema"

    @property
    def file(self) -> Path:
        return self.run_dir / f"ovn{self.database}_db.db"

    @property
    def socket(self) -> Path:
        return self.run_dir / f"ovn{self.database}_db.sock"

    @property
    def connection(self) -> str:
        """Its TCP remote, as Neutron's `[ovn]` options and `ovn-nbctl --db` name it."""
        return f"tcp:127.0.0.1:{self.port}"

    @property
    def unix_connection(self) -> str:
        return f"unix:{self.socket}"

    def start(self, timeout: float = 30) -> OvsdbServer:
        for tool in ("ovsdb-server", "ovsdb-tool"):
            if shutil.which(tool) is None:
                raise ServiceUnavailable(f"{tool} is not installed; run: make install")
        if not self.schema.exists():
            raise ServiceUnavailable(f"{self.schema} is missing (ovn-common); "
                                     "run: make install")
        self.run_dir.mkdir(parents=True, exist_ok=True)
        create_database(self.file, self.schema)
        logged = self.log_path.stat().st_size if self.log_path.exists() else 0
        self._spawn(["ovsdb-server", str(self.file),
                     f"--remote=punix:{self.socket}", "--remote=ptcp:0:127.0.0.1",
                     f"--unixctl={self.control}",
                     "-vsyslog:off", "-vconsole:info"],
                    env=environment(self.run_dir))

        def listening() -> bool:
            if not self.running():
                raise self._fail(f"ovsdb-server ({self.database}) exited at start")
            port = LISTENING.search(_logged_since(self, logged))
            if port:
                self.port = int(port.group(1))
            return bool(port) and self.socket.exists()

        try:
            wait_until(listening, timeout, f"OVN's {self.database} ovsdb-server")
        except ServiceUnavailable as exc:
            raise self._fail(str(exc)) from None
        return self

    def listen_on(self, address: str, timeout: float = 10) -> str:
        """One more TCP remote, on `address` (a test network's bridge, for the chassis in its
        namespaces: they do not reach this namespace's loopback), on a port the kernel picks:
        its connection (`tcp:ADDRESS:PORT`). Gone with the server, or by `stop_listening`."""
        logged = self.log_path.stat().st_size if self.log_path.exists() else 0
        self.appctl("ovsdb-server/add-remote", f"ptcp:0:{address}")
        found: list[str] = []

        def listening() -> bool:
            port = listening_on(address).search(_logged_since(self, logged))
            if port:
                found.append(port.group(1))
            return bool(port)

        wait_until(listening, timeout, f"OVN's {self.database} ovsdb-server on {address}")
        return f"tcp:{address}:{found[0]}"

    def stop_listening(self, address: str) -> None:
        self.appctl("ovsdb-server/remove-remote", f"ptcp:0:{address}")

    def appctl(self, *args: str) -> str:
        return appctl(self.control, *args, timeout=10)

    @property
    def control(self) -> Path:
        return self.run_dir / f"ovsdb-{self.database}.ctl"


class OvnNorthd(Service):
    """`ovn-northd` between the two databases (over their unix sockets)."""

    nb: OvsdbServer
    sb: OvsdbServer

    @classmethod
    def create(cls, run_dir: Path, nb: OvsdbServer, sb: OvsdbServer) -> OvnNorthd:
        northd = cls("ovn-northd", run_dir, 0)
        northd.nb, northd.sb = nb, sb
        return northd

    @property
    def control(self) -> Path:
        return self.run_dir / "ovn-northd.ctl"

    def status(self) -> str:
        """`ovn-appctl status`: "Status: active" once it holds the southbound lock."""
        return appctl(self.control, "status", program="ovn-appctl", timeout=10,
                      check=False).strip()

    def start(self, timeout: float = 30) -> OvnNorthd:
        if shutil.which("ovn-northd") is None:
            raise ServiceUnavailable("ovn-northd is not installed (ovn-central); "
                                     "run: make install")
        self._spawn(["ovn-northd", f"--ovnnb-db={self.nb.unix_connection}",
                     f"--ovnsb-db={self.sb.unix_connection}", f"--unixctl={self.control}",
                     "-vsyslog:off", "-vconsole:info"],
                    env=environment(self.run_dir))

        def active() -> bool:
            if not self.running():
                raise self._fail("ovn-northd exited at start")
            return self.control.exists() and self.status() == "Status: active"

        try:
            wait_until(active, timeout, "ovn-northd")
        except ServiceUnavailable as exc:
            raise self._fail(str(exc)) from None
        return self


@dataclass
class OvnCentral:
    """The northbound and southbound databases and ovn-northd, under one run directory."""

    nb: OvsdbServer
    sb: OvsdbServer
    northd: OvnNorthd

    @classmethod
    def create(cls, run_dir: Path) -> OvnCentral:
        nb, sb = OvsdbServer.create(run_dir, "nb"), OvsdbServer.create(run_dir, "sb")
        return cls(nb, sb, OvnNorthd.create(run_dir, nb, sb))

    @property
    def run_dir(self) -> Path:
        return self.nb.run_dir

    @property
    def pids(self) -> list[int]:
        return [s.pid for s in (self.nb, self.sb, self.northd) if s.pid]

    def start(self) -> OvnCentral:
        """Both databases, then ovn-northd; all stopped if any fails."""
        try:
            self.nb.start()
            self.sb.start()
            self.northd.start()
        except BaseException:
            self.stop()
            raise
        return self

    def nbctl(self, *args: str) -> str:
        """`ovn-nbctl --db=<the northbound socket> ARGS...`: its output."""
        return run(["ovn-nbctl", f"--db={self.nb.unix_connection}", *args], self.run_dir)

    def stop(self) -> None:
        """ovn-northd and both databases, side by side (their sockets go with them)."""
        stop_pids(self.pids)
        for service in (self.northd, self.nb, self.sb):
            service.pid = None

"""A hypervisor host's Open vSwitch (Debian's binaries, never its system service): its own
`ovsdb-server` and `ovs-vswitchd`, inside the host's network namespace.

    switch = OpenVSwitch.create(run_dir, host).start()    # host: a netns.Host
    switch.vsctl("add-port", "br-int", "tap0", ...)
    switch.stop()

The database is made by `ovsdb-tool create` from Debian's vswitch.ovsschema and served on a
unix socket in the run directory only. Each daemon runs in the foreground as our child
(`ip netns exec` execs in place), its pidfile, log and control socket (`unixctl`) in the run
directory; OVS_RUNDIR points there too (the bridges' OpenFlow sockets, `br-int.mgmt`), so
nothing lands in /var/run/openvswitch, the machine's.

This kernel has no openvswitch module, so the switch is OVS's userspace datapath
(`datapath_type=netdev`): its bridges and internal ports are tap devices, its ports on
other devices read and write them through AF_PACKET sockets, and its tunnels (Geneve)
are OVS's own, routed by OVS: the tunnel's source address must be on an OVS bridge. So
the host's address moves from its cable (`eth0`, the veth on the test network's bridge) to
`br-phy`, a netdev bridge with `eth0` as its port, and every packet of the host crosses the
userspace datapath.

`ovs-vswitchd` runs under `--monitor`: its first process (our child, `pid`) restarts the
daemon after a crash (ovs-vswitchd 3.1's userspace conntrack hit an assertion once in three
runs of Neutron's ports here); `daemon_pid` is the daemon's own, from its pidfile. The
daemons run in the run directory (a crash's core file, where the machine keeps any, lands
there). A restarted ovs-vswitchd makes its taps again: the bridges and the internal ports
still in the host's namespace, not those a test moved into another namespace (a tap dies
with the process that made it).
"""

from __future__ import annotations

import contextlib
import shutil
from pathlib import Path

from etcd_compute.errors import ServiceUnavailable
from tools.local_services import offloads
from tools.local_services.netns import Host, ip
from tools.local_services.ovs_tools import appctl, create_database, environment, run
from tools.local_services.process import Service, stop_pids, wait_until

SCHEMA = Path("/usr/share/openvswitch/vswitch.ovsschema")
INTEGRATION_BRIDGE = "br-int"
UNDERLAY_BRIDGE = "br-phy"


def in_namespace(host: Host, argv: list[str]) -> list[str]:
    return ["ip", "netns", "exec", host.netns, *argv]


def read_pid(pidfile: Path) -> int | None:
    with contextlib.suppress(OSError, ValueError):
        return int(pidfile.read_text().strip())
    return None


class OvsDaemon(Service):
    """One daemon of a host's switch, run in the host's namespace."""

    host: Host

    @property
    def pidfile(self) -> Path:
        return self.run_dir / f"{self.name}.pid"

    @property
    def control(self) -> Path:
        return self.run_dir / f"{self.name}.ctl"

    @property
    def daemon_pid(self) -> int | None:
        """The daemon's pid (under --monitor, the monitor's child)."""
        return read_pid(self.pidfile)

    def spawn(self, program: str, *args: str) -> None:
        self._spawn(in_namespace(self.host, [
            program, *args, f"--pidfile={self.pidfile}", f"--unixctl={self.control}",
            *self.options]), env=environment(self.run_dir), cwd=self.run_dir)

    @property
    def options(self) -> list[str]:
        return ["-vsyslog:off", "-vconsole:info"]

    def wait_started(self, timeout: float) -> None:
        def up() -> bool:
            if not self.running():
                raise self._fail(f"{self.name} exited at start")
            return self.control.exists() and self.daemon_pid is not None

        try:
            wait_until(up, timeout, f"{self.name} in {self.host.netns}")
        except ServiceUnavailable as exc:
            raise self._fail(str(exc)) from None

    def appctl(self, *args: str) -> str:
        return appctl(self.control, *args)

    @property
    def pids(self) -> list[int]:
        """The monitor (if any) and the daemon: both are stopped."""
        return [pid for pid in {self.pid, self.daemon_pid} if pid]

    def stop(self) -> None:
        stop_pids(self.pids)
        self.pid = None


class OpenVSwitch:
    """A host's ovsdb-server and ovs-vswitchd, `br-int` (OVN's) and `br-phy` (the host's
    address, Geneve's underlay), in the host's network namespace."""

    def __init__(self, run_dir: Path, host: Host):
        self.run_dir, self.host = run_dir, host
        self.db = OvsDaemon("ovsdb-server", run_dir, 0)
        self.vswitchd = OvsDaemon("ovs-vswitchd", run_dir, 0)
        self.db.host = self.vswitchd.host = host

    @classmethod
    def create(cls, run_dir: Path, host: Host) -> OpenVSwitch:
        return cls(run_dir, host)

    @property
    def file(self) -> Path:
        return self.run_dir / "conf.db"

    @property
    def socket(self) -> Path:
        return self.run_dir / "db.sock"

    @property
    def connection(self) -> str:
        return f"unix:{self.socket}"

    @property
    def pids(self) -> list[int]:
        return [*self.vswitchd.pids, *self.db.pids]

    def vsctl(self, *args: str, wait: bool = True) -> str:
        """`ovs-vsctl --db=<its socket> ARGS...` (waiting for ovs-vswitchd to apply them,
        unless `wait` is False): its output."""
        return run(["ovs-vsctl", f"--db={self.connection}", "--timeout=30",
                    *([] if wait else ["--no-wait"]), *args], self.run_dir, timeout=60)

    def start(self, settings: dict[str, str] | None = None, timeout: float = 30
              ) -> OpenVSwitch:
        """The database (with `settings`, `other_config:...`/`external_ids:...` of the
        Open_vSwitch row, before ovs-vswitchd reads them), ovs-vswitchd, then the bridges;
        everything stopped if a step fails."""
        for tool in ("ovsdb-server", "ovsdb-tool", "ovs-vswitchd", "ovs-vsctl"):
            if shutil.which(tool) is None:
                raise ServiceUnavailable(f"{tool} is not installed (openvswitch-switch); "
                                         "run: make install")
        if not SCHEMA.exists():
            raise ServiceUnavailable(f"{SCHEMA} is missing (openvswitch-common); "
                                     "run: make install")
        self.run_dir.mkdir(parents=True, exist_ok=True)
        try:
            self._start(settings or {}, timeout)
        except BaseException:
            self.stop()
            raise
        return self

    def _start(self, settings: dict[str, str], timeout: float) -> None:
        create_database(self.file, SCHEMA)
        self.db.spawn("ovsdb-server", str(self.file), f"--remote=punix:{self.socket}")
        self.db.wait_started(timeout)
        wait_until(self.socket.exists, timeout, f"{self.socket}")
        self.vsctl("init", wait=False)
        # No userspace TSO (other_config:userspace-tso-enable): with it, the host's own TCP
        # over br-phy works without the cable's fix below, but OVS 3.1 drops every packet
        # with offload flags at a tunnel ("Tunneling packets with HW offload flags is not
        # supported: packet dropped"), so no TCP crossed Geneve between two ports.
        if settings:
            self.vsctl("set", "Open_vSwitch", ".",
                       *(f"{key}={value}" for key, value in settings.items()), wait=False)
        self.vswitchd.spawn("ovs-vswitchd", self.connection, "--monitor")
        self.vswitchd.wait_started(timeout)
        self.vsctl("--may-exist", "add-br", INTEGRATION_BRIDGE, "--",
                   "set", "Bridge", INTEGRATION_BRIDGE, "datapath_type=netdev",
                   "fail_mode=secure", "other_config:disable-in-band=true")
        self._underlay()

    def _underlay(self) -> None:
        """`br-phy` with the host's cable as its port and its address (see above). The
        cable's end on the test network's bridge fills TCP checksums and segments (offloads.py):
        packets from the root namespace reach the userspace datapath through an AF_PACKET
        socket on `eth0`, as they were handed to the veth. Left as they were (checksums
        unfilled, segments up to 64 KiB), ovn-controller's TCP connection to the southbound
        database never came up."""
        if self.host.veth:
            offloads.set_tx_checksumming(self.host.veth, False)
        self.vsctl("--may-exist", "add-br", UNDERLAY_BRIDGE, "--",
                   "set", "Bridge", UNDERLAY_BRIDGE, "datapath_type=netdev", "--",
                   "--may-exist", "add-port", UNDERLAY_BRIDGE, "eth0")
        prefix = ip("-n", self.host.netns, "-4", "-o", "addr", "show", "dev", "eth0").stdout
        for words in (line.split() for line in prefix.splitlines()):
            address = words[words.index("inet") + 1]
            ip("-n", self.host.netns, "addr", "del", address, "dev", "eth0")
            ip("-n", self.host.netns, "addr", "add", address, "dev", UNDERLAY_BRIDGE)
        ip("-n", self.host.netns, "link", "set", UNDERLAY_BRIDGE, "up")

    def stop(self) -> None:
        """ovs-vswitchd (monitor and daemon), then ovsdb-server, by their pids; their bridges'
        tap devices go with ovs-vswitchd."""
        self.vswitchd.stop()
        self.db.stop()

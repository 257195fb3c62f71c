"""A hypervisor host's Neutron OVN metadata agent: what brings a guest's request for
169.254.169.254 to the host's metadata API, as on a compute node of Nova with ML2/OVN.

    agent = OvnMetadataAgent.create(run_dir, host, switch, southbound, api_port=8775)
    agent.start()      # its secret in agent.secret_file (0600), for the metadata API
    agent.stop()       # the agent, its privsep daemons and haproxys, its namespaces

For each network with a port bound to the host's chassis the agent makes a namespace
`ovnmeta-<network>`, a veth from it into `br-int` as the network's OVN metadata port
(a localport: each chassis answers its own guests), 169.254.169.254 on it, and an haproxy
there that hands the guests' requests to the agent's proxy (a unix socket in the state
directory), which asks the metadata API with X-Instance-ID (the port's device_id) and its
signature (HMAC-SHA256 with `metadata_proxy_shared_secret`, made per run here).

The program is Neutron 29's `neutron-ovn-metadata-agent` (the lighter of the two that do
this, docs/explanation/networking.md#metadata) or, for comparison, `neutron-ovn-agent`
with its `metadata` extension; same configuration. It runs in the host's network
namespace (nsenter: the network namespace only) and in a mount namespace of its own
(unshare) whose /run/netns is a private tmpfs holding only the host's own namespace (as
`ip netns` names it outside): the `ovnmeta-<network>` namespaces it makes are named there,
so two hosts' agents on one machine each make their own `ovnmeta-<network>` for a
network with guests on both, as two machines' agents do. It runs against the host's own
Open vSwitch database (its socket) and the southbound database, its state and lock
directories in the run directory; as root, so no sudo and no rootwrap: `root_helper =
env` (a command run as it is), and privsep's helpers started so (`privsep-helper` of
Neutron's virtualenv, on its PATH).

Stopped by pid: the agent is started as a child subreaper, so the privsep daemons (which
fork away from the helper the agent started) and the haproxys (which daemonize) stay its
descendants and are found from its pid, never by name; the haproxys are also found by the
pidfiles the agent wrote in our state directory. (Being their subreaper, the agent also
holds any that exit before it as zombies, a pid each, until it exits: for tests; a host's
service manager runs the agent in production.) Its namespaces are seen from outside
through the agent's own root (`/proc/<pid>/root/run/netns`); they live as long as a
process is in them or in the agent's mount namespace (which holds their names), so once
its processes are stopped they are gone, which `stop` checks (no process left in the
mount namespace or in any of them).
"""

from __future__ import annotations

import contextlib
import os
import secrets
import shutil
import sys
import tempfile
import time
from pathlib import Path

import psutil

from etcd_compute.errors import ServiceUnavailable
from tools.local_services.netns import Host
from tools.local_services.ovs import OpenVSwitch
from tools.local_services.process import NEUTRON_VENV, Service, stop_pids, wait_until

PROGRAMS = ("neutron-ovn-metadata-agent", "neutron-ovn-agent")
NAMESPACE_PREFIX = "ovnmeta-"
MAX_SOCKET_PATH = 97  # haproxy's limit on a unix socket's path
# The agent's own /run/netns (run by sh in its new mount namespace, in the host's network
# namespace): a tmpfs over the machine's, with the host's namespace under its own name.
PRIVATE_NETNS = (
    'mount -t tmpfs -o mode=0755,size=1m "ovnmeta-$1" /run/netns'
    ' && touch "/run/netns/$1" && mount --bind /proc/self/ns/net "/run/netns/$1"'
    ' && shift && exec "$@"'
)
# Makes the process a child subreaper (PR_SET_CHILD_SUBREAPER, kept across execve), then
# execs the agent: its descendants' orphans are reparented to it, not to init.
SUBREAPER_EXEC = (
    "import ctypes, os, sys\n"
    "if ctypes.CDLL(None, use_errno=True).prctl(36, 1, 0, 0, 0) != 0:\n"
    "    sys.exit('prctl(PR_SET_CHILD_SUBREAPER): ' + os.strerror(ctypes.get_errno()))\n"
    "os.execv(sys.argv[1], sys.argv[1:])\n"
)


def write_private(path: Path, text: str) -> None:
    """`text` in a new file only its owner may read (0600 from its creation)."""
    path.unlink(missing_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w") as handle:
        handle.write(text)


def namespaces_in_use(inodes: set[int]) -> set[int]:
    """The pids of the processes in a namespace (network or mount) of `inodes` (never ours:
    our own namespaces are left out of `inodes`)."""
    own = set()
    for kind in ("net", "mnt"):
        with contextlib.suppress(OSError):
            own.add(os.stat(f"/proc/self/ns/{kind}").st_ino)
    inodes = inodes - own
    found: set[int] = set()
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        for kind in ("net", "mnt"):
            with contextlib.suppress(OSError):
                if os.stat(entry / "ns" / kind).st_ino in inodes:
                    found.add(int(entry.name))
    found.discard(os.getpid())
    return found


class OvnMetadataAgent(Service):
    """The metadata agent of one host, asking the metadata API at `api_host`:`api_port`
    (an address in the host's namespace)."""

    host: Host
    switch: OpenVSwitch
    southbound: str
    program: str
    api_host: str
    api_port: int
    started_in: float | None = None
    socket_dir: Path | None = None
    _seen_namespaces: set[int]  # every ovnmeta- namespace namespace_ids() found, for stop

    @classmethod
    def create(cls, run_dir: Path, host: Host, switch: OpenVSwitch, southbound: str,
               api_port: int, api_host: str = "127.0.0.1",
               program: str = PROGRAMS[0]) -> OvnMetadataAgent:
        if program not in PROGRAMS:
            raise ValueError(f"{program}: not one of {', '.join(PROGRAMS)}")
        agent = cls(program, run_dir, 0)
        agent.host, agent.switch, agent.southbound = host, switch, southbound
        agent.program, agent.api_host, agent.api_port = program, api_host, api_port
        agent._seen_namespaces = set()
        return agent

    # -- its files ------------------------------------------------------------------------

    @property
    def state_dir(self) -> Path:
        return self.run_dir / "state"

    @property
    def proxy_socket(self) -> Path:
        """Where haproxy hands the guests' requests to the agent: in the state directory
        when its path is short enough for haproxy (at most 97 characters), else in a
        directory of its own under /tmp (a test's run directory is longer), removed at
        stop."""
        inside = self.state_dir / "metadata_proxy"
        if len(str(inside)) <= MAX_SOCKET_PATH:
            return inside
        if self.socket_dir is None:
            self.socket_dir = Path(tempfile.mkdtemp(prefix="ovnmeta-proxy-"))
        return self.socket_dir / "proxy"

    @property
    def pids_dir(self) -> Path:
        return self.state_dir / "external" / "pids"

    @property
    def config_file(self) -> Path:
        return self.run_dir / "agent.ini"

    @property
    def secret_file(self) -> Path:
        """The shared secret alone (0600), for the metadata API's `shared_secret_file`."""
        return self.run_dir / "metadata-secret"

    def _write_config(self) -> None:
        """The agent's configuration (0600: it holds the secret) and the secret's file."""
        for name in ("state", "lock"):
            (self.run_dir / name).mkdir(parents=True, exist_ok=True)
        secret = secrets.token_hex(32)
        write_private(self.secret_file, secret + "\n")
        write_private(self.config_file, (
            "[DEFAULT]\n"
            "debug = False\n"
            "use_stderr = True\n"
            f"state_path = {self.state_dir}\n"
            f"metadata_proxy_socket = {self.proxy_socket}\n"
            f"metadata_proxy_shared_secret = {secret}\n"
            f"nova_metadata_host = {self.api_host}\n"
            f"nova_metadata_port = {self.api_port}\n"
            "nova_metadata_protocol = http\n"
            # Requests are proxied in the agent's own process (no worker processes).
            "metadata_workers = 0\n"
            "[agent]\n"
            # As root: no sudo, no rootwrap. `env` runs the command as it is (an empty
            # root_helper would leave privsep's helpers to its default, sudo).
            "root_helper = env\n"
            # neutron-ovn-agent's: the metadata extension alone.
            "extensions = metadata\n"
            f"[oslo_concurrency]\nlock_path = {self.run_dir / 'lock'}\n"
            f"[ovs]\novsdb_connection = {self.switch.connection}\n"
            f"[ovn]\novn_sb_connection = {self.southbound}\n"
        ))

    # -- life -----------------------------------------------------------------------------

    def start(self, timeout: float = 60) -> OvnMetadataAgent:
        """Started, its proxy listening (stopped if it never does)."""
        program = NEUTRON_VENV / "bin" / self.program
        if not program.exists():
            raise ServiceUnavailable(f"{program} is missing (make install builds "
                                     ".venv-neutron)")
        for tool in ("haproxy", "nsenter", "unshare"):
            if shutil.which(tool) is None:
                raise ServiceUnavailable(f"{tool} is not installed; run: make install")
        self._write_config()
        began = time.monotonic()
        path = f"{NEUTRON_VENV / 'bin'}:{os.environ.get('PATH', '/usr/sbin:/usr/bin')}"
        # nsenter, unshare and sh each exec the next: the pid is the agent's.
        self._spawn(["nsenter", f"--net=/run/netns/{self.host.netns}", "--",
                     "unshare", "--mount", "--propagation", "private", "--",
                     "sh", "-c", PRIVATE_NETNS, "private-netns", self.host.netns,
                     sys.executable, "-c", SUBREAPER_EXEC, str(program),
                     "--config-file", str(self.config_file)],
                    env={"PATH": path}, cwd=self.run_dir)

        def listening() -> bool:
            if not self.running():
                raise self._fail(f"{self.program} of {self.host.name} exited at start")
            return self.proxy_socket.is_socket()

        try:
            wait_until(listening, timeout, f"{self.program} of {self.host.name}")
        except ServiceUnavailable as exc:
            raise self._fail(str(exc)) from None
        self.started_in = time.monotonic() - began
        return self

    @property
    def pids(self) -> list[int]:
        """The agent and its descendants (privsep daemons, haproxys; reparented to it, its
        own subreaper), and the haproxys of our pidfiles."""
        if not self.pid or not self.running():
            return self.haproxy_pids()
        try:
            descendants = [p.pid for p in psutil.Process(self.pid).children(recursive=True)]
        except psutil.NoSuchProcess:
            descendants = []
        return sorted({self.pid, *descendants, *self.haproxy_pids()})

    def haproxy_pids(self) -> list[int]:
        """The live haproxys of the pidfiles in our state directory (each checked to be
        haproxy with our configuration: a pidfile's number may have been reused)."""
        found = []
        for pidfile in self.pids_dir.glob("*.pid") if self.pids_dir.is_dir() else []:
            with contextlib.suppress(ValueError, OSError, psutil.Error):
                process = psutil.Process(int(pidfile.read_text().strip()))
                if str(self.state_dir) in " ".join(process.cmdline()):
                    found.append(process.pid)
        return found

    @property
    def netns_dir(self) -> Path | None:
        """Its own /run/netns, seen through its root; None when it is not running or its
        tmpfs is not mounted yet (until then that directory is the machine's, whose
        namespaces are not its)."""
        if not self.running():
            return None
        try:
            mounts = Path(f"/proc/{self.pid}/mounts").read_text()
        except OSError:
            return None
        if f"{NAMESPACE_PREFIX}{self.host.netns} /run/netns tmpfs " not in mounts:
            return None
        return Path(f"/proc/{self.pid}/root/run/netns")

    def namespaces(self) -> list[str]:
        """The ovnmeta- namespaces it made (named in its own /run/netns)."""
        return sorted(self.namespace_ids())

    def namespace_ids(self) -> dict[str, int]:
        """Its ovnmeta- namespaces by name: their inode numbers (as /proc/PID/ns/net shows
        them), each remembered for stop's check."""
        found = {}
        netns = self.netns_dir
        with contextlib.suppress(OSError):
            for space in netns.glob(NAMESPACE_PREFIX + "*") if netns else []:
                with contextlib.suppress(OSError):
                    found[space.name] = space.stat().st_ino
        self._seen_namespaces.update(found.values())
        return found

    def strays(self) -> list[int]:
        """Live processes started for this agent that are no longer its descendants (one
        spawned while it was being stopped is reparented to init): found by our own
        configuration file or state directory on their command line."""
        marks = (str(self.config_file), str(self.state_dir))
        found = []
        for process in psutil.process_iter(["pid", "cmdline"]):
            command = " ".join(process.info["cmdline"] or ())
            if process.pid != os.getpid() and any(mark in command for mark in marks):
                found.append(process.pid)
        return found

    def stop(self, timeout: float = 10.0) -> None:
        """Its processes (found from its pid and pidfiles, then any stray of ours) side by
        side; then its mount namespace and its ovnmeta- namespaces checked gone: no process
        left in any of them (the names are the mount namespace's, so with it they go)."""
        self.namespace_ids()
        mount = None
        # Its mount namespace once its /run/netns is its own (never the one it came from:
        # until it unshares, the agent's pid is in ours, the machine's).
        with contextlib.suppress(OSError):
            if self.netns_dir is not None:
                mount = os.stat(f"/proc/{self.pid}/ns/mnt").st_ino
                if mount == os.stat("/proc/self/ns/mnt").st_ino:
                    mount = None
        stop_pids(self.pids)
        self.pid = None
        stop_pids(self.strays())
        watched = {*self._seen_namespaces, *([mount] if mount else [])}
        deadline = time.monotonic() + timeout
        while True:
            left = namespaces_in_use(watched)
            if not left:
                break
            if time.monotonic() > deadline:
                raise ServiceUnavailable(
                    f"{self.program} of {self.host.name}: process(es) "
                    f"{', '.join(map(str, sorted(left)))} still in its namespaces "
                    f"{timeout:.0f} s after its stop")
            stop_pids(sorted(left))
            time.sleep(0.2)
        if self.socket_dir is not None:
            shutil.rmtree(self.socket_dir, ignore_errors=True)
            self.socket_dir = None

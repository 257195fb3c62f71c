"""A private test network: one bridge in the root namespace, network namespaces on it.

    net = TestNetwork.create()          # bridge ecb<id> with 10.77.X.1/24, X free
    etcd0 = net.add_host("etcd0")       # namespace ec<id>-etcd0 at 10.77.X.2 (veth)
    net.run_in(etcd0, ["etcd", ...])    # argv prefixed with `ip netns exec`
    net.cut(etcd0); net.rejoin(etcd0)   # its cable pulled (veth down) and plugged back
    net.delete()                        # namespaces, veths, bridge: gone

Everything is named with a short random id, so two runs on one machine never
collide, and registered in /run/etcd-compute-netns/<id> with the creator's
pid: a later `create` removes what a run killed before its teardown left
behind (its pid is gone): namespaces, veths and bridge, not processes (a member
left running by a SIGKILLed run is cut off, and is for whoever started it to
stop). Addresses are from 10.77.0.0/16 and exist only on
this bridge and in these namespaces: nothing of ours reaches beyond them.

Plain `ip` commands (iproute2), no extra dependency. `ip netns exec` execs the
command in place, so the pid of the child is the pid of the program itself.
"""

from __future__ import annotations

import contextlib
import ipaddress
import json
import os
import random
import secrets
import socket
import subprocess
import threading
from dataclasses import dataclass, field
from pathlib import Path

from etcd_compute.errors import ServiceUnavailable
from tools.local_services.process import host_lock, pid_alive

REGISTRY = Path("/run/etcd-compute-netns")
BASE = ipaddress.ip_network("10.77.0.0/16")


def ip(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    """Run `ip ARGS`; a failure is one line naming the command."""
    done = subprocess.run(["ip", *args], capture_output=True, text=True, check=False)
    if check and done.returncode:
        raise ServiceUnavailable(f"ip {' '.join(args)}: {done.stderr.strip()[:200]}")
    return done


def netns_usable() -> str | None:
    """None when namespaces, veths and bridges can be made here; else why not."""
    if os.geteuid() != 0:
        return "network namespaces need root"
    probe = f"ecp{secrets.token_hex(3)}"
    made = ip("link", "add", probe, "type", "bridge", check=False)
    if made.returncode:
        return f"cannot create a bridge: {made.stderr.strip()[:200]}"
    ip("link", "del", probe, check=False)
    return None


def listen_in(netns: str, address: str, port: int) -> socket.socket:
    """A TCP socket listening on `address:port` inside the namespace `netns` (its own
    loopback, say), made by this process: a socket stays in the namespace it was made in,
    so a thread of ours accepts there and connects here. The namespace is entered by one
    short-lived thread (setns(2) moves the calling thread only)."""
    import ctypes

    made: list[socket.socket] = []
    failed: list[BaseException] = []

    def enter_and_listen() -> None:
        libc = ctypes.CDLL(None, use_errno=True)
        try:
            with open(f"/run/netns/{netns}", "rb") as handle:
                if libc.setns(handle.fileno(), 0x40000000) != 0:  # CLONE_NEWNET
                    raise OSError(ctypes.get_errno(), f"setns into {netns}")
            made.append(socket.create_server((address, port), backlog=64))
        except BaseException as exc:  # noqa: BLE001 (handed to the caller)
            failed.append(exc)
        # The thread ends here, still in `netns`: no other code runs on it.

    thread = threading.Thread(target=enter_and_listen, name=f"listen-in:{netns}")
    thread.start()
    thread.join()
    if failed:
        raise ServiceUnavailable(f"cannot listen on {address}:{port} in namespace {netns}: "
                                 f"{failed[0]}")
    return made[0]


@dataclass
class Host:
    """One namespace on the bridge: `veth` is its end in the root namespace."""

    name: str
    netns: str
    ip: str
    veth: str


@dataclass
class TestNetwork:
    __test__ = False  # a test network, not a pytest test class
    id: str
    subnet: ipaddress.IPv4Network
    hosts: dict[str, Host] = field(default_factory=dict)

    @property
    def bridge(self) -> str:
        return f"ecb{self.id}"

    @property
    def gateway(self) -> str:
        """The root namespace's address on the bridge (Placement, the tests' clients)."""
        return str(self.subnet.network_address + 1)

    # --- life --------------------------------------------------------------------------

    @classmethod
    def create(cls) -> TestNetwork:
        # Choosing a subnet and registering it is one step for every run (and xdist worker)
        # on this machine: two choosing at once could take the same one.
        with host_lock("netns"):
            sweep_stale()
            net = cls(secrets.token_hex(3), _free_subnet())
            net._register()
        try:
            ip("link", "add", net.bridge, "type", "bridge")
            ip("addr", "add", f"{net.gateway}/{net.subnet.prefixlen}", "dev", net.bridge)
            ip("link", "set", net.bridge, "up")
        except ServiceUnavailable:
            net.delete()
            raise
        return net

    def add_host(self, name: str) -> Host:
        """A namespace with lo up and eth0 on the bridge, at the next free address."""
        if name in self.hosts:
            raise ValueError(f"host {name} exists")
        cabled = [h for h in self.hosts.values() if h.veth]
        host = Host(name, f"ec{self.id}-{name}",
                    str(self.subnet.network_address + 2 + len(cabled)),
                    f"ecv{self.id}{len(self.hosts):02d}")
        self.hosts[name] = host
        self._register()
        ip("netns", "add", host.netns)
        ip("-n", host.netns, "link", "set", "lo", "up")
        ip("link", "add", host.veth, "type", "veth", "peer", "name", "eth0",
           "netns", host.netns)
        ip("link", "set", host.veth, "master", self.bridge, "up")
        ip("-n", host.netns, "addr", "add", f"{host.ip}/{self.subnet.prefixlen}", "dev", "eth0")
        ip("-n", host.netns, "link", "set", "eth0", "up")
        return host

    def add_space(self, name: str) -> Host:
        """A namespace with only lo (up), off the bridge: for what a test plugs into it (a
        port of a switch in another namespace, moved here)."""
        if name in self.hosts:
            raise ValueError(f"host {name} exists")
        host = Host(name, f"ec{self.id}-{name}", "", "")
        self.hosts[name] = host
        self._register()
        ip("netns", "add", host.netns)
        ip("-n", host.netns, "link", "set", "lo", "up")
        return host

    def delete(self) -> None:
        """Remove every namespace, veth and the bridge (what exists of them); idempotent.
        Processes still inside a namespace keep it alive: stop them (by pid) first."""
        for host in self.hosts.values():
            if host.veth:
                ip("link", "del", host.veth, check=False)
            ip("netns", "del", host.netns, check=False)
        ip("link", "del", self.bridge, check=False)
        with contextlib.suppress(OSError):
            (REGISTRY / self.id).unlink()

    # --- use ---------------------------------------------------------------------------

    def run_in(self, host: Host, argv: list[str]) -> list[str]:
        """`argv` as run inside the namespace of `host`."""
        return ["ip", "netns", "exec", host.netns, *argv]

    def cut(self, host: Host) -> None:
        """Pull the host's cable: its veth end on the bridge goes down. Packets in both
        directions are dropped silently (no reset, no "unreachable"), as in a real
        partition: open connections stall, new ones time out."""
        ip("link", "set", host.veth, "down")

    def rejoin(self, host: Host) -> None:
        ip("link", "set", host.veth, "up")

    def is_cut(self, host: Host) -> bool:
        return "state DOWN" in ip("link", "show", host.veth).stdout

    # --- the registry of what exists, for sweeping after a killed run ---------------------

    def _register(self) -> None:
        REGISTRY.mkdir(mode=0o700, parents=True, exist_ok=True)
        record = {"pid": os.getpid(), "subnet": str(self.subnet),
                  "hosts": [[h.netns, h.veth] for h in self.hosts.values()]}
        partial = REGISTRY / f".{self.id}.partial"
        partial.write_text(json.dumps(record))
        partial.replace(REGISTRY / self.id)


def _registered() -> dict[str, dict[str, object]]:
    found = {}
    for path in REGISTRY.glob("[0-9a-f]*") if REGISTRY.exists() else ():
        with contextlib.suppress(OSError, ValueError):
            found[path.name] = json.loads(path.read_text())
    return found


def sweep_stale() -> list[str]:
    """Remove the networks of runs that died without their teardown; their ids."""
    swept = []
    for net_id, record in _registered().items():
        if pid_alive(int(record.get("pid", 0))):  # type: ignore[call-overload]
            continue
        net = TestNetwork(net_id, ipaddress.ip_network(str(record["subnet"])))
        for netns, veth in record.get("hosts", []):  # type: ignore[union-attr]
            net.hosts[netns] = Host(netns, netns, "", veth)
        net.delete()
        swept.append(net_id)
    return swept


def _free_subnet() -> ipaddress.IPv4Network:
    """A /24 of 10.77.0.0/16 that overlaps no address or route here and no live run's."""
    used = [ipaddress.ip_network(str(record.get("subnet"))) for record in _registered().values()]
    lines = ip("-4", "-o", "addr", "show").stdout.splitlines()
    for line in lines:
        words = line.split()
        if "inet" in words:
            used.append(ipaddress.ip_interface(words[words.index("inet") + 1]).network)
    for line in ip("-4", "route", "show").stdout.splitlines():
        with contextlib.suppress(ValueError, IndexError):
            used.append(ipaddress.ip_network(line.split()[0], strict=False))
    candidates = list(BASE.subnets(new_prefix=24))
    random.shuffle(candidates)
    for subnet in candidates:
        if not any(subnet.overlaps(other) for other in used):
            return subnet
    raise ServiceUnavailable("no free /24 left in 10.77.0.0/16")

"""Hypervisor hosts on this machine, each with its own libvirtd listening on TLS for its
peers, as the multi-host guide sets them up (docs/how-to/operators/several-hosts.md,
step 10).

    with Hypervisors.create(["a", "b"], root, image_dirs=[...]) as hosts:
        a, b = hosts["a"], hosts["b"]
        a.driver().build(spec)                      # the libvirt driver, as compute.py has it
        b.driver().prepare_incoming(spec) ...

Each host is a network namespace on a private bridge (`netns.py`) with a private
libvirtd (`private_libvirt.py`): TLS only, on the namespace's address, admitting
the cluster's libvirt client certificates, its qemu migrating over TLS only.
Certificates come from one cluster CA (`Pki.issue_libvirt`). Every host's guest
network has the same name and CIDR (as on real hosts, where each has its own NAT
network); the metadata address answers "closed" at once inside each namespace,
so a guest does not wait out its metadata retries. The drivers run in the
caller's process (root namespace): they reach their own libvirtd by its socket
and the peers' over TLS through the bridge. Each guest network's bridge has a
name of this run's (`ecg<net id><n>`), defined here before any driver looks: the
driver's `ip` commands, run in the root namespace, find no such bridge there and
change nothing of the machine's. `root` must be traversable by qemu's user
(not a 0700 temporary directory). `ComputeHosts` runs compute.py on them. Used by
tests/virt and bench/migration.py.
"""

from __future__ import annotations

import contextlib
import grp
import os
import shutil
import signal
import subprocess
import sys
import uuid as uuidlib
import xml.etree.ElementTree as ET
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import libvirt

from etcd_compute.config import deep_merge
from etcd_compute.defaults import COMPUTE_DEFAULTS
from etcd_compute.drivers.libvirt import LibvirtDriver
from etcd_compute.mdserver.supervisor import stop_mdserver
from etcd_compute.pki import Pki
from etcd_compute.virt import network
from tools.local_services.netns import Host, TestNetwork, ip
from tools.local_services.private_libvirt import LibvirtTls, PrivateLibvirtd
from tools.local_services.process import REPO, stop_pids, wait_until
from tools.local_services.proxy import CuttableProxy

GUEST_NETWORK = "etcd-compute-mig"
GUEST_CIDR = "192.168.126.0/24"
QEMU_GROUP = "libvirt-qemu"


@dataclass
class Hypervisor:
    name: str
    space: Host
    libvirtd: PrivateLibvirtd
    pki_dir: Path
    config: dict[str, Any]

    @property
    def address(self) -> str:
        return self.space.ip

    @property
    def instances_dir(self) -> Path:
        return Path(self.config["compute"]["instances_dir"])

    def driver(self, **migration: Any) -> LibvirtDriver:
        config = deep_merge(self.config, {"driver": {"libvirt": {"migration": migration}}})
        return LibvirtDriver(config)

    def connection(self) -> libvirt.virConnect:
        return libvirt.open(self.libvirtd.uri)

    def domain_active(self, uuid: str) -> bool:
        connection = self.connection()
        try:
            return bool(connection.lookupByName(uuid).isActive())
        except libvirt.libvirtError:
            return False
        finally:
            connection.close()

    def has_domain(self, uuid: str) -> bool:
        connection = self.connection()
        try:
            connection.lookupByName(uuid)
            return True
        except libvirt.libvirtError:
            return False
        finally:
            connection.close()

    def console(self, uuid: str) -> str:
        path = self.instances_dir / uuid / "console.log"
        return path.read_text(errors="replace") if path.exists() else ""

    def clear(self) -> None:
        """Back to how `add` made it: every guest destroyed by the driver (its files and
        DHCP reservation go with it), any reservation left on the guest network released,
        its libvirtd running (restarted if a test killed it)."""
        if self.libvirtd.libvirtd is None or self.libvirtd.libvirtd.poll() is not None:
            self.libvirtd.restart()
        connection = self.connection()
        try:
            names = [domain.name() for domain in connection.listAllDomains()]
            driver = self.driver()
            for name in names:
                driver.destroy(name)
            net = connection.networkLookupByName(GUEST_NETWORK)
            for mac in network.reservations(net):
                network.release(net, mac)
        finally:
            connection.close()


@dataclass
class Hypervisors:
    root: Path
    net: TestNetwork
    pki: Pki
    hosts: dict[str, Hypervisor]
    image_dirs: list[str]

    def __getitem__(self, name: str) -> Hypervisor:
        return self.hosts[name]

    @classmethod
    @contextlib.contextmanager
    def create(cls, names: list[str], parent: Path, image_dirs: list[str]
               ) -> Iterator[Hypervisors]:
        """Hosts `names` with their files in a new directory under `parent` (removed after,
        and `parent` too when nothing else is left in it)."""
        parent.mkdir(parents=True, exist_ok=True, mode=0o711)
        parent.chmod(0o711)
        root = parent / f"mig-{uuidlib.uuid4().hex[:8]}"
        root.mkdir(mode=0o711)
        net = TestNetwork.create()
        hosts = cls(root, net, Pki(root / "pki"), {}, image_dirs)
        try:
            hosts.pki.init()
            for name in names:
                hosts.add(name)
            yield hosts
        finally:
            hosts.close()

    def add(self, name: str, pki_dir: Path | None = None) -> Hypervisor:
        """A host with certificates for its own name (`host-<name>`, the compute's name, as
        the fence checks) and address (or those in `pki_dir`, to make a host that presents
        someone else's)."""
        space = self.net.add_host(name)
        # The guests' metadata retries end at once ("connection refused" from here).
        ip("-n", space.netns, "addr", "add", "169.254.169.254/32", "dev", "lo")
        if pki_dir is None:
            pki_dir = self.pki.issue_libvirt(f"host-{name}", self.root / f"libvirt-pki-{name}",
                                             ips=[space.ip],
                                             qemu_group=grp.getgrnam(QEMU_GROUP).gr_gid)
        libvirtd = PrivateLibvirtd(self.root / f"libvirt-{name}", space.netns,
                                   tls=LibvirtTls(space.ip, pki_dir))
        self.hosts[name] = host = Hypervisor(name, space, libvirtd, pki_dir,
                                             self._config(name, space, pki_dir))
        libvirtd.start()
        xml = ET.fromstring(network.network_xml(GUEST_NETWORK, GUEST_CIDR))
        bridge = xml.find("bridge")
        assert bridge is not None
        bridge.set("name", f"ecg{self.net.id}{len(self.hosts)}")
        connection = host.connection()
        try:
            connection.networkDefineXML(ET.tostring(xml, encoding="unicode")).create()
        finally:
            connection.close()
        return host

    def _config(self, name: str, space: Host, pki_dir: Path) -> dict[str, Any]:
        here = self.root / name
        return deep_merge(COMPUTE_DEFAULTS, {
            "compute": {"state_dir": str(here / "state"),
                        "instances_dir": str(here / "instances")},
            "driver": {"libvirt": {
                "uri": f"qemu:///system?socket={self.root / f'libvirt-{name}'}"
                       "/run/libvirt/libvirt-sock",
                "domain_type": "qemu", "network": GUEST_NETWORK, "network_cidr": GUEST_CIDR,
                "image_cache_dir": str(here / "images"), "image_file_dirs": self.image_dirs,
                "boot_timeout_seconds": 180, "shutdown_timeout_seconds": 1,
                "migration": {"address": space.ip, "pki_dir": str(pki_dir)}}},
        })

    def close(self) -> None:
        for host in self.hosts.values():
            with contextlib.suppress(Exception):
                host.libvirtd.stop()
        self.net.delete()
        shutil.rmtree(self.root, ignore_errors=True)
        with contextlib.suppress(OSError):
            self.root.parent.rmdir()  # only when no other run is using it


class ComputeHosts:
    """compute.py daemons on the hypervisor hosts, each inside its network namespace, as a
    real host runs it: its own libvirtd (TLS for its peers), its metadata server, etcd and
    Placement reached through forwarders (its endpoints, and the certificates naming them,
    stay 127.0.0.1). `config(name)` is what compute.py gets there; `start(name)` runs it."""

    def __init__(self, hosts: Hypervisors, host_config: Callable[[str], dict[str, Any]],
                 write_yaml: Callable[[str, dict[str, Any]], Path], logs: Path,
                 also_reach: tuple[str, ...] = ()):
        """`host_config(name)`: a compute config with its etcd and Placement (endpoints on
        127.0.0.1) and credentials; `write_yaml(file name, config)`: where it is written;
        `also_reach`: more endpoints on 127.0.0.1 the hosts reach the same way (Keystone,
        Glance: "https://127.0.0.1:PORT/...")."""
        self.hosts, self.write_yaml, self.logs = hosts, write_yaml, logs
        self.also_reach = also_reach
        self.configs: dict[str, dict[str, Any]] = {}
        self.daemons: dict[str, subprocess.Popen[bytes]] = {}
        self._forwarders: list[subprocess.Popen[bytes]] = []
        self._proxies: list[CuttableProxy] = []
        for name in hosts.hosts:
            self._add(name, host_config)

    def _add(self, name: str, host_config: Callable[[str], dict[str, Any]]) -> None:
        host = self.hosts[name]
        config = host_config(f"host-{name}")
        endpoints = {"etcd": config["etcd"]["endpoints"][0],
                     "placement": config["placement"]["endpoint"],
                     **{endpoint: endpoint for endpoint in self.also_reach}}
        for service, endpoint in endpoints.items():
            address, port = endpoint.split("://")[-1].split("/")[0].rsplit(":", 1)
            if not any(p.port == int(port) for p in self._proxies):
                self._proxies.append(CuttableProxy(address, int(port), int(port),
                                                   self.hosts.net.gateway).start())
            self._forwarders.append(subprocess.Popen(
                self.hosts.net.run_in(host.space, [
                    sys.executable, "-m", "tools.local_services.proxy", f"127.0.0.1:{port}",
                    f"{self.hosts.net.gateway}:{port}"]),
                cwd=REPO, stdin=subprocess.DEVNULL))
            wait_until(lambda p=int(port), h=host: _listening(
                self.hosts.net.run_in(h.space, []), p), 30,
                f"the {service} forwarder in host {name}'s namespace")
        here = self.hosts.root / name
        here.mkdir(parents=True, exist_ok=True, mode=0o711)
        mdserver_conf = here / "mdserver.conf"
        settings = host.config["driver"]["libvirt"]
        mdserver_conf.write_text(
            "[mdserver]\n"
            f"instances_dir = {host.instances_dir}\n"
            f"network = {settings['network']}\n"
            f"libvirt_uri = {settings['uri']}\n"
            f"log_file = {here / 'mdserver.log'}\n")
        self.configs[name] = deep_merge(config, {
            "compute": {key: host.config["compute"][key] for key in ("state_dir",
                                                                     "instances_dir")}
            | {"job_timeout_seconds": 240},
            "driver": {"name": "libvirt", "libvirt": {
                **settings, "mdserver_config": str(mdserver_conf)}},
        })

    def rp(self, name: str) -> str:
        return self.configs[name]["compute"]["uuid"]

    def start(self, name: str) -> subprocess.Popen[bytes]:
        path = self.write_yaml(f"host-{name}.yaml", self.configs[name])
        with open(self.logs / f"host-{name}.log", "ab") as log:
            process = subprocess.Popen(
                self.hosts.net.run_in(self.hosts[name].space, [
                    sys.executable, str(REPO / "compute.py"), "--config", str(path)]),
                cwd=REPO, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                start_new_session=True)
        self.daemons[name] = process
        return process

    def kill9(self, name: str) -> None:
        """The compute daemon only (its guests run on, its libvirtd answers)."""
        process = self.daemons.pop(name)
        os.kill(process.pid, signal.SIGKILL)
        process.wait()

    def close(self) -> None:
        stop_pids(process.pid for process in self.daemons.values())
        for name in self.configs:
            with contextlib.suppress(Exception):
                stop_mdserver(self.configs[name])
        stop_pids(process.pid for process in self._forwarders)
        for proxy in self._proxies:
            proxy.stop()


def _listening(prefix: list[str], port: int) -> bool:
    done = subprocess.run([*prefix, "ss", "-Hltn", f"sport = :{port}"], capture_output=True,
                          text=True, check=False)
    return bool(done.stdout.strip())

"""Hypervisor hosts whose guests are on Neutron ports: each an OVN chassis (ovn_hosts.py: a
network namespace on a private bridge, its own Open vSwitch and ovn-controller) with a
private libvirtd (private_libvirt.py) in the same namespace, as a compute host of the
`neutron` network backend is.

    with OvnHypervisors.create(["hv1", "hv2"], parent, network.ovn, image_dirs,
                               neutron_settings) as hosts:
        config = hosts["hv1"].config         # a compute config: network.backend neutron
        worker.init_worker(config); worker.build(spec) ...

The guest's NIC is plugged as Nova's libvirt driver plugs an OVS port (virt/vif.py): libvirt
makes the tap and runs `ovs-vsctl add-port br-int ...` itself. That `ovs-vsctl` looks for
its database at /run/openvswitch/db.sock; in the libvirtd's private mount namespace that
directory is the host's switch's run directory (its `db.sock`), so each libvirtd plugs into
its own host's switch. (The mount point, an empty /run/openvswitch, is made on the
machine if it is missing: the machine's own Open vSwitch service is not run.)

With `metadata_port`, each host serves its guests' metadata as a compute node of Nova
with ML2/OVN does: its chassis runs Neutron's OVN metadata agent (ovn_metadata.py, in a
mount namespace of its own, so two hosts on one machine each have their
`ovnmeta-<network>`), and the host runs our metadata API in signed mode where its agent asks it
(host_mdserver.py: in the root namespace on the hosts' bridge's address, a port each),
reading the host's instances, asking its libvirtd, and asking Neutron for public-ipv4
with the host's compute's credential.

The chassis' hostname is the host's name and so is the compute's (`compute.name`): ML2/OVN
binds a port whose `binding:host_id` is that name to that chassis. The drivers run in the
caller's process (root namespace) and reach each libvirtd by its socket; qemu runs in the
host's namespace. `root` must be traversable by qemu's user (not a 0700 directory).
Everything is stopped by pid, the namespaces and bridge removed, on close.
"""

from __future__ import annotations

import contextlib
import grp
import shutil
import uuid as uuidlib
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import libvirt

from etcd_compute.config import deep_merge
from etcd_compute.defaults import COMPUTE_DEFAULTS
from etcd_compute.drivers.libvirt import LibvirtDriver
from etcd_compute.pki import Pki
from tools.local_services.host_mdserver import HostMdserver
from tools.local_services.ovn import OvnCentral
from tools.local_services.ovn_hosts import OvnHost, OvnHosts
from tools.local_services.private_libvirt import LibvirtTls, PrivateLibvirtd

OVS_RUN_DIR = "/run/openvswitch"
QEMU_GROUP = "libvirt-qemu"


@dataclass
class OvnHypervisor:
    name: str
    chassis: OvnHost
    libvirtd: PrivateLibvirtd
    config: dict[str, Any]
    mdserver: HostMdserver | None = None  # with a metadata port: the host's metadata API

    @property
    def pids(self) -> list[int]:
        """Every process of the host: the chassis' (its switch, ovn-controller, metadata
        agent and its descendants), the libvirtd's and the metadata API's."""
        return [*self.chassis.pids, *self._own_daemons()]

    @property
    def daemon_pids(self) -> list[int]:
        """Its daemons, each to run as long as the host: as `pids`, but of the metadata
        agent only its own (its privsep helpers come and go)."""
        agent = self.chassis.metadata
        return [*self.chassis.switch.pids, *self.chassis.controller.pids,
                *([agent.pid] if agent is not None and agent.pid else []),
                *self._own_daemons()]

    def _own_daemons(self) -> list[int]:
        daemon = self.libvirtd.libvirtd
        own = [daemon.pid if daemon else None, self.mdserver.pid if self.mdserver else None]
        return [pid for pid in own if isinstance(pid, int)]

    @property
    def instances_dir(self) -> Path:
        return Path(self.config["compute"]["instances_dir"])

    def driver(self) -> LibvirtDriver:
        return LibvirtDriver(self.config)

    def console(self, uuid: str) -> str:
        path = self.instances_dir / uuid / "console.log"
        return path.read_text(errors="replace") if path.exists() else ""

    def domains(self) -> list[str]:
        connection = libvirt.open(self.libvirtd.uri)
        try:
            return [domain.name() for domain in connection.listAllDomains()]
        finally:
            connection.close()

    def br_int_ports(self) -> list[str]:
        """The ports on the host's br-int (the guests' taps, plugged by libvirt)."""
        return self.chassis.switch.vsctl("list-ports", "br-int").split()


@dataclass
class OvnHypervisors:
    root: Path
    chassis: OvnHosts
    hosts: dict[str, OvnHypervisor] = field(default_factory=dict)
    pki: Pki | None = None  # with migration: each libvirtd also listens over TLS

    def __getitem__(self, name: str) -> OvnHypervisor:
        return self.hosts[name]

    @classmethod
    @contextlib.contextmanager
    def create(cls, names: list[str], parent: Path, ovn: OvnCentral, image_dirs: list[str],
               neutron: dict[str, Any], migration: bool = False,
               metadata_port: int | None = None) -> Iterator[OvnHypervisors]:
        """Hosts `names`, their files in a new directory under `parent` (removed after, and
        `parent` too when nothing else is left in it); `neutron`: the `network.neutron`
        section of their computes. With `migration`, each libvirtd also listens over TLS on
        its chassis' address with certificates of the hosts' own PKI, as
        tools/local_services/hypervisors.py's do: guests move live between them. With
        `metadata_port`, each chassis runs Neutron's OVN metadata agent (ovn_hosts.py) and
        each host our metadata API where the agent asks it (host_mdserver.py; the first
        host's on `metadata_port`)."""
        parent.mkdir(parents=True, exist_ok=True, mode=0o711)
        parent.chmod(0o711)
        root = parent / f"ovn-{uuidlib.uuid4().hex[:8]}"
        root.mkdir(mode=0o711)
        made: OvnHypervisors | None = None
        try:
            Path(OVS_RUN_DIR).mkdir(exist_ok=True)
            made = cls(root, OvnHosts.create(names, root / "switches", ovn,
                                                metadata_port=metadata_port))
            if migration:
                made.pki = Pki(root / "pki")
                made.pki.init()
            for name in names:
                made.add(name, image_dirs, neutron)
            yield made
        finally:
            if made is not None:
                made.close()
            shutil.rmtree(root, ignore_errors=True)
            with contextlib.suppress(OSError):
                parent.rmdir()  # only when no other run is using it

    def add(self, name: str, image_dirs: list[str], neutron: dict[str, Any]) -> OvnHypervisor:
        chassis = self.chassis[name]
        tls, moves = None, {}
        if self.pki is not None:
            pki_dir = self.pki.issue_libvirt(f"host-{name}", self.root / f"libvirt-pki-{name}",
                                             ips=[chassis.address],
                                             qemu_group=grp.getgrnam(QEMU_GROUP).gr_gid)
            tls = LibvirtTls(chassis.address, pki_dir)
            moves = {"migration": {"address": chassis.address, "pki_dir": str(pki_dir)}}
        libvirtd = PrivateLibvirtd(self.root / f"libvirt-{name}", chassis.space.netns,
                                   tls=tls, binds={OVS_RUN_DIR: chassis.switch.run_dir})
        here = self.root / name
        config = deep_merge(COMPUTE_DEFAULTS, {
            "compute": {"name": name, "state_dir": str(here / "state"),
                        "instances_dir": str(here / "instances")},
            "driver": {"name": "libvirt", "libvirt": {
                "uri": libvirtd.uri, "domain_type": "qemu",
                "image_cache_dir": str(here / "images"), "image_file_dirs": image_dirs,
                "boot_timeout_seconds": 180, "shutdown_timeout_seconds": 1, **moves}},
            "network": {"backend": "neutron", "neutron": neutron},
        })
        self.hosts[name] = host = OvnHypervisor(name, chassis, libvirtd, config)
        libvirtd.start()
        if chassis.metadata is not None and self.chassis.metadata_port:
            host.mdserver = HostMdserver.create(
                self.root / f"mdserver-{name}", chassis.space, chassis.metadata.api_host,
                chassis.metadata.api_port, host.instances_dir, libvirtd.uri,
                chassis.metadata.secret_file, config)
            host.mdserver.start()
        return host

    def close(self) -> None:
        """Each metadata API and libvirtd (its guests first), then the chassis
        (ovn_hosts.py)."""
        for host in self.hosts.values():
            if host.mdserver is not None:
                host.mdserver.stop()
            with contextlib.suppress(Exception):
                host.libvirtd.stop()
        self.chassis.close()

"""Hypervisor hosts as OVN chassis: each a network namespace on a private bridge (netns.py)
with its own Open vSwitch (ovs.py) and ovn-controller (ovn_controller.py), following the
southbound database of an `OvnCentral` (ovn.py) through the bridge.

    with OvnHosts.create(["a", "b"], run_dir, ovn) as hosts:
        device = hosts["a"].plug(port_id, mac)      # an OVS internal port on a's br-int
        hosts.net.add_space("vm1"); hosts["a"].move(device, space) ...

`plug` does what a compute host's driver does for a Neutron port of ML2/OVN (os-vif's
`ovs` plugin): an interface on `br-int` whose `external_ids:iface-id` is the port's id;
ovn-controller claims the port's southbound Port_Binding for its chassis, ovn-northd marks
the northbound port up, and Neutron sets the port ACTIVE. Everything is stopped by pid and
the namespaces and bridge removed by `close`.

With `metadata_port`, each host also runs Neutron's OVN metadata agent (ovn_metadata.py),
asking the host's metadata API at the hosts' bridge's own address in the root namespace
(`net.gateway`, where a compute host's own services are: its metadata API reaches Keystone
and Neutron there), on a port of the host's own: `metadata_port` for the first host, a free
one for each other (the test starts that API, e.g. host_mdserver.py, at
`host.metadata.api_host`:`api_port` with `host.metadata.secret_file`).
"""

from __future__ import annotations

import contextlib
import subprocess
from dataclasses import dataclass, field
from pathlib import Path

from etcd_compute.errors import ServiceUnavailable
from tools.local_services.netns import Host, TestNetwork, ip
from tools.local_services.ovn import OvnCentral
from tools.local_services.ovn_controller import OvnController, settings
from tools.local_services.ovn_metadata import PROGRAMS, OvnMetadataAgent
from tools.local_services.ovs import INTEGRATION_BRIDGE, OpenVSwitch
from tools.local_services.process import free_port, stop_pids


@dataclass
class OvnHost:
    name: str
    space: Host
    switch: OpenVSwitch
    controller: OvnController
    metadata: OvnMetadataAgent | None = None

    @property
    def address(self) -> str:
        return self.space.ip

    @property
    def pids(self) -> list[int]:
        return [*(self.metadata.pids if self.metadata else []), *self.controller.pids,
                *self.switch.pids]

    def plug(self, port_id: str, mac: str, device: str | None = None) -> str:
        """An OVS internal port on br-int for Neutron port `port_id` (its MAC `mac`), as a
        compute driver plugs a guest's: its device name (`tap` and the port id's start, as
        Nova names them)."""
        device = device or f"tap{port_id[:11]}"
        self.switch.vsctl(
            "--may-exist", "add-port", INTEGRATION_BRIDGE, device, "--",
            "set", "Interface", device, "type=internal", f'mac="{mac}"',
            f"external_ids:iface-id={port_id}", f'external_ids:attached-mac="{mac}"',
            "external_ids:iface-status=active")
        return device

    def unplug(self, device: str) -> None:
        self.switch.vsctl("--if-exists", "del-port", INTEGRATION_BRIDGE, device)

    def move(self, device: str, space: Host, address: str, mtu: int) -> None:
        """The plugged device into `space` (a guest's stand-in), with its fixed IP (a /24)
        and the network's MTU, up."""
        ip("-n", self.space.netns, "link", "set", device, "netns", space.netns)
        ip("-n", space.netns, "link", "set", device, "mtu", str(mtu))
        ip("-n", space.netns, "addr", "add", f"{address}/24", "dev", device)
        ip("-n", space.netns, "link", "set", device, "up")


@dataclass
class OvnHosts:
    net: TestNetwork
    ovn: OvnCentral
    run_dir: Path
    southbound: str = ""
    hosts: dict[str, OvnHost] = field(default_factory=dict)
    # The first host's metadata API's port (others get free ports): with it, a metadata agent
    # per host.
    metadata_port: int | None = None
    metadata_program: str = PROGRAMS[0]

    def __getitem__(self, name: str) -> OvnHost:
        return self.hosts[name]

    @classmethod
    def create(cls, names: list[str], run_dir: Path, ovn: OvnCentral,
               metadata_port: int | None = None,
               metadata_program: str = PROGRAMS[0]) -> OvnHosts:
        """Hosts `names` started, their files under `run_dir` (everything stopped and
        removed if one fails to start), each with a metadata agent when `metadata_port` is
        given (above); a context manager that closes them."""
        hosts = cls(TestNetwork.create(), ovn, run_dir, metadata_port=metadata_port,
                    metadata_program=metadata_program)
        try:
            hosts.southbound = ovn.sb.listen_on(hosts.net.gateway)
            for name in names:
                hosts.add(name)
        except BaseException:
            hosts.close()
            raise
        return hosts

    def __enter__(self) -> OvnHosts:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def add(self, name: str) -> OvnHost:
        space = self.net.add_host(name)
        switch = OpenVSwitch.create(self.run_dir / name, space)
        controller = OvnController.create(switch)
        self.hosts[name] = host = OvnHost(name, space, switch, controller)
        switch.start(settings(name, self.southbound, space.ip))
        controller.start()
        if self.metadata_port:
            port = self.metadata_port if len(self.hosts) == 1 else free_port()
            host.metadata = OvnMetadataAgent.create(
                self.run_dir / name / "metadata", space, switch, self.southbound,
                port, api_host=self.net.gateway, program=self.metadata_program)
            host.metadata.start()
        return host

    @property
    def pids(self) -> list[int]:
        return [pid for host in self.hosts.values() for pid in host.pids]

    def close(self) -> None:
        """Every host's metadata agent (its processes and namespaces), ovn-controller (its
        chassis out of the southbound database), then its switch (all side by side), the
        southbound database's remote on the bridge, the namespaces and the bridge."""
        leftovers = []
        for host in self.hosts.values():
            if host.metadata:
                try:
                    host.metadata.stop()
                except ServiceUnavailable as exc:  # the rest still stopped, then said
                    leftovers.append(str(exc))
        for host in self.hosts.values():
            with contextlib.suppress(subprocess.TimeoutExpired):
                host.controller.leave()
        stop_pids([pid for host in self.hosts.values() for pid in host.controller.pids])
        stop_pids([pid for host in self.hosts.values() for pid in host.switch.pids])
        for host in self.hosts.values():
            host.controller.pid = host.switch.vswitchd.pid = host.switch.db.pid = None
        if self.southbound and self.ovn.sb.running():
            with contextlib.suppress(RuntimeError):
                self.ovn.sb.stop_listening(self.net.gateway)
        self.net.delete()
        if leftovers:
            raise ServiceUnavailable("; ".join(leftovers))

"""The site's uplink for OVN chassis in network namespaces (ovn_hosts.py): an external
network's segment, a machine "outside" on it (the user's laptop), and each host's provider
bridge patched to it, as Neutron's ML2/OVN guide sets up a flat provider network.

    with Outside.create(hosts.chassis.hosts.values()) as outside:
        outside.cidr, outside.address       # the segment, the laptop's own address on it
        outside.run(["ssh", ...])           # argv as run in the laptop's namespace

- **The segment**: a bridge in the root namespace (a `TestNetwork`: a free /24 of
  10.77.0.0/16, registered for the sweep after a killed run) with no address of the root
  namespace on it: the machine is not on that segment and routes nothing to or from it.
- **The laptop**: the namespace `outside` on the bridge with its own address, the
  segment's second one (`address`); it also stands for the site's router (`gateway`:
  the Neutron subnet's gateway), behind which is nothing.
- **Each host**: a netdev bridge `br-ex` in its Open vSwitch with one port, its end of a
  veth whose other end is on the segment's bridge; `ovn-bridge-mappings=physnet1:br-ex`
  (ovn-controller patches br-int to br-ex for the flat network on `physnet1`) and
  `ovn-cms-options=enable-chassis-as-gw`: ML2/OVN schedules routers' gateway ports on
  these chassis (every host here is a gateway chassis). The veth's end on the bridge has
  its transmit checksumming off (offloads.py): the laptop's TCP reaches the userspace
  datapath through an AF_PACKET socket with its checksums filled.

- **The cloud from the laptop** (`reach(ports)`): this machine's services on its loopback
  (Keystone, the compute API, Neutron, Glance: their catalog's endpoints) answer at the
  laptop's own 127.0.0.1 on the same ports, through forwarders of this process that
  listen in the laptop's namespace (proxy.py, `listen_netns`): a client run there (Tempest
  for its scenario tests: the cloud's API and the floating IPs both in its reach) keeps
  the endpoints and the certificates that name them. Only the laptop's loopback: the
  segment (and a guest on it) reaches none of them.

Everything is removed on close: the forwarders, the hosts' br-ex and settings (while their
switches run), the namespace, the veths and the bridge.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterable
from dataclasses import dataclass, field

from etcd_compute.errors import ServiceUnavailable
from tools.local_services import offloads
from tools.local_services.netns import Host, TestNetwork, ip
from tools.local_services.ovn_hosts import OvnHost
from tools.local_services.proxy import CuttableProxy

PHYSNET = "physnet1"
PROVIDER_BRIDGE = "br-ex"
UPLINK = "uplink"  # the veth's end in each host's namespace, br-ex's port


@dataclass
class Outside:
    net: TestNetwork
    laptop: Host
    hosts: list[OvnHost] = field(default_factory=list)
    forwarders: list[CuttableProxy] = field(default_factory=list)

    @classmethod
    def create(cls, hosts: Iterable[OvnHost]) -> Outside:
        """The segment, the laptop on it and `hosts` attached (everything removed if a step
        fails); a context manager that removes it."""
        net = TestNetwork.create()
        outside: Outside | None = None
        try:
            ip("addr", "flush", "dev", net.bridge)
            outside = cls(net, net.add_host("outside"))
            for host in hosts:
                outside.attach(host)
        except BaseException:
            if outside is not None:
                outside.close()
            else:
                net.delete()
            raise
        return outside

    def __enter__(self) -> Outside:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # --- the segment ---------------------------------------------------------------------

    @property
    def cidr(self) -> str:
        return str(self.net.subnet)

    @property
    def address(self) -> str:
        """The laptop's address on the segment."""
        return self.laptop.ip

    @property
    def gateway(self) -> str:
        """The site's router for Neutron's subnet: the laptop's address (nothing behind)."""
        return self.laptop.ip

    @property
    def pool(self) -> tuple[str, str]:
        """The addresses Neutron may hand out on the segment: .100 to .199."""
        base = self.net.subnet.network_address
        return str(base + 100), str(base + 199)

    def run(self, argv: list[str]) -> list[str]:
        """`argv` as run in the laptop's namespace."""
        return self.net.run_in(self.laptop, argv)

    def reach(self, ports: Iterable[int]) -> None:
        """This machine's services on 127.0.0.1:`ports` answer at the laptop's 127.0.0.1 on
        the same ports (its loopback only)."""
        for port in ports:
            if any(forwarder.port == port for forwarder in self.forwarders):
                continue
            self.forwarders.append(CuttableProxy(
                "127.0.0.1", port, port, listen_netns=self.laptop.netns).start())

    # --- the hosts -----------------------------------------------------------------------

    def attach(self, host: OvnHost, gateway: bool = True) -> None:
        """`host`'s br-ex patched to the segment, mapped as `physnet1`; a gateway chassis
        unless `gateway` is False."""
        name = f"uplink-{host.name}"
        if name in self.net.hosts:
            raise ValueError(f"{host.name} is attached")
        veth = f"ecx{self.net.id}{len(self.hosts):02d}"
        # Registered before it exists, with no namespace of its own: a sweep removes the
        # veth, and its end in the host's namespace goes with it.
        self.net.hosts[name] = Host(name, "", "", veth)
        self.net._register()  # noqa: SLF001 (the sweep's registry, this package's own)
        self.hosts.append(host)
        ip("link", "add", veth, "type", "veth", "peer", "name", UPLINK,
           "netns", host.space.netns)
        offloads.set_tx_checksumming(veth, False)
        ip("link", "set", veth, "master", self.net.bridge, "up")
        ip("-n", host.space.netns, "link", "set", UPLINK, "up")
        host.switch.vsctl(
            "--may-exist", "add-br", PROVIDER_BRIDGE, "--",
            "set", "Bridge", PROVIDER_BRIDGE, "datapath_type=netdev", "--",
            "--may-exist", "add-port", PROVIDER_BRIDGE, UPLINK)
        ip("-n", host.space.netns, "link", "set", PROVIDER_BRIDGE, "up")
        settings = [f"external_ids:ovn-bridge-mappings={PHYSNET}:{PROVIDER_BRIDGE}"]
        if gateway:
            settings.append("external_ids:ovn-cms-options=enable-chassis-as-gw")
        host.switch.vsctl("set", "Open_vSwitch", ".", *settings)

    def detach(self, host: OvnHost) -> None:
        """`host`'s settings and br-ex removed (its switch still running)."""
        with contextlib.suppress(ServiceUnavailable, RuntimeError, OSError):
            host.switch.vsctl("remove", "Open_vSwitch", ".", "external_ids",
                              "ovn-bridge-mappings", "ovn-cms-options")
            host.switch.vsctl("--if-exists", "del-br", PROVIDER_BRIDGE)

    def close(self) -> None:
        """The forwarders stopped, the hosts detached, then the namespace, the veths and the
        bridge."""
        for forwarder in self.forwarders:
            forwarder.stop()
        self.forwarders.clear()
        for host in self.hosts:
            if host.switch.vswitchd.running():
                self.detach(host)
        self.hosts.clear()
        self.net.delete()


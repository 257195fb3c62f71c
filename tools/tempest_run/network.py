"""The Tempest cloud's network service: Neutron on OVN (`NetworkStack`: MariaDB, OVN's
central services, Neutron with ML2/OVN and the router plugin, the `network` service of the
cloud's Keystone), and an OVN chassis per fake compute host (`OvnHosts`: a network
namespace on a bridge of the run's own, with its Open vSwitch and ovn-controller, the
chassis' hostname the compute's name).

The compute API runs on the neutron backend with the service credential (so a create's
networks, ports and security groups are Neutron's), and each fake compute host plugs its
guests' ports on its chassis' `br-int` (`driver.fake.ovsdb`, drivers/fake_vifs.py): OVN
binds them, Neutron sets them ACTIVE and notifies the compute API (in the catalog as
`compute`), whose `network-vif-plugged` makes the server ACTIVE, as on a libvirt host.

Every process is stopped by its pid; they are also recorded as the stack's daemons, so
`python -m tools.local_services down --run-dir DIR` after a crash stops them too (a dead
run's namespaces and bridge are swept by the next `TestNetwork.create`).
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from typing import Any

from tools.local_services import cloud as local_cloud
from tools.local_services.keystone import KeystoneServer
from tools.local_services.networking import NetworkStack
from tools.local_services.ovn_hosts import OvnHosts
from tools.local_services.stack import LocalStack

Say = Callable[[str], None]

# Seconds a build waits for its ports (Nova's vif_plugging_timeout): under Tempest's
# build_timeout (120), so a port that never comes up ends the server in ERROR with the reason.
VIF_PLUGGING_TIMEOUT = 90


class TempestStack(LocalStack):
    """`make up`'s stack with the network service: Neutron starts once Keystone runs and
    before the compute API, which then runs on the neutron backend."""

    network: NetworkStack | None = None
    chassis: OvnHosts | None = None
    with_network: bool = False
    # The scenario run's hypervisor hosts, outside and `public` (scenario.py), closed first.
    site_exits: contextlib.ExitStack | None = None

    def _up_api(self, api_port: int, say: Say) -> None:
        if self.with_network and self.network is None:
            self.network = start_network(self, say)
        super()._up_api(api_port, say)

    def api_config(self) -> dict[str, Any]:
        config = super().api_config()
        if self.network is not None:
            config["network"] = self.network_section()
        return config

    def network_section(self, ovn_host: str | None = None) -> dict[str, Any]:
        """compute.yaml's and schedule.yaml's `network`: Neutron (from the catalog) as the
        service user."""
        keystone = self._keystone()
        neutron: dict[str, Any] = {"keystone": local_cloud.service_credentials(keystone),
                                   "vif_plugging_timeout": VIF_PLUGGING_TIMEOUT}
        if not self.plain:
            neutron["ca_cert"] = str(self.pki.ca_cert)
        return {"backend": "neutron", "neutron": neutron}

    def start_chassis(self, names: list[str], say: Say) -> None:
        """An OVN chassis per fake host (its hostname the host's name)."""
        assert self.network is not None
        self.chassis = OvnHosts.create(names, self.run_dir / "chassis", self.network.ovn)
        for name in names:
            host = self.chassis[name]
            for pid in host.pids:
                self.remember_daemon(f"{name}-ovs", pid, str(self.run_dir / "chassis" / name))
            say(f"OVN chassis {name} (namespace {host.space.netns}, {host.address}, "
                f"OVSDB {host.switch.connection})")

    def fake_driver(self, name: str) -> dict[str, Any]:
        """The fake driver's section for host `name`: plugging on its chassis' switch."""
        if self.chassis is None:
            return {"name": "fake"}
        return {"name": "fake", "fake": {"ovsdb": self.chassis[name].switch.connection}}

    def stop_network(self, say: Say) -> None:
        """The scenario's hosts, outside and `public`, the chassis (out of OVN), then
        Neutron and the rest; idempotent."""
        if self.site_exits is not None:
            try:
                self.site_exits.close()
            except Exception as exc:  # noqa: BLE001 (said; the rest is still stopped)
                say(f"removing the hypervisor hosts and the outside: {exc}")
            self.site_exits = None
            say("hypervisor hosts, the outside namespace and public removed")
        if self.chassis is not None:
            with contextlib.suppress(Exception):
                self.chassis.close()
            self.chassis = None
            say("OVN chassis stopped")
        if self.network is not None:
            self.network.stop()
            self.network = None
            say("network service stopped (Neutron, OVN, MariaDB)")


def start_network(stack: LocalStack, say: Say) -> NetworkStack:
    keystone: KeystoneServer = stack._keystone()
    network = NetworkStack.create(stack.run_dir / "network", keystone,
                                  pki=None if stack.plain else stack.pki)
    network.start()
    for pid in network.pids:
        stack.remember_daemon("network", pid, str(stack.run_dir / "network"))
    say(f"network service started in {network.timings['total']:.0f} s (Neutron on OVN, "
        f"{network.neutron.endpoint}, in the catalog as network)")
    return network


def neutron_extensions(network: NetworkStack, keystone: KeystoneServer) -> list[str]:
    """The aliases of the extensions Neutron serves (tempest.conf's api_extensions)."""
    from etcd_compute.neutron import NeutronClient

    verify = network.neutron.verify
    client = NeutronClient({"endpoint": network.neutron.endpoint,
                            "ca_cert": verify if isinstance(verify, str) else None,
                            "timeout": 30.0,
                            "keystone": local_cloud.service_credentials(keystone)})
    answer = client.request("GET", "/extensions").json()
    return sorted(ext["alias"] for ext in answer["extensions"])

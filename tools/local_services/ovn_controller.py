"""A hypervisor host's OVN chassis: `ovn-controller` (Debian's `ovn-host` binary, never its
system service) on the host's own Open vSwitch (ovs.py), in the host's network namespace.

    chassis = OvnController.create(run_dir, switch, "tcp:10.77.3.1:6642").start()

The chassis' settings are the Open_vSwitch row's `external_ids`, written before ovn-controller
reads them (`settings`): its name (`system-id`) and `hostname` are the host's name (the
namespace shares the machine's hostname, and ML2/OVN binds a port with `binding:host_id`
only to a chassis of that hostname), the southbound database it follows (`ovn-remote`: a
namespace does not reach the root namespace's loopback, so an address on the test
network's bridge), Geneve from the host's address, and `br-int` of the userspace datapath.
Its pidfile, log and control socket are in the run directory (never /var/run/ovn).
"""

from __future__ import annotations

import shutil
from pathlib import Path

from etcd_compute.errors import ServiceUnavailable
from tools.local_services.ovs import INTEGRATION_BRIDGE, OpenVSwitch, OvsDaemon, in_namespace
from tools.local_services.ovs_tools import appctl, environment
from tools.local_services.process import wait_until


def settings(name: str, southbound: str, encap_ip: str) -> dict[str, str]:
    """The Open_vSwitch row's `external_ids` that make the host chassis `name`."""
    return {"external_ids:system-id": name,
            "external_ids:hostname": name,
            "external_ids:ovn-remote": southbound,
            "external_ids:ovn-encap-type": "geneve",
            "external_ids:ovn-encap-ip": encap_ip,
            "external_ids:ovn-bridge": INTEGRATION_BRIDGE,
            "external_ids:ovn-bridge-datapath-type": "netdev"}


class OvnController(OvsDaemon):
    """`ovn-controller` on `switch`'s database, as chassis `name`."""

    switch: OpenVSwitch

    @classmethod
    def create(cls, switch: OpenVSwitch) -> OvnController:
        controller = cls("ovn-controller", switch.run_dir, 0)
        controller.switch, controller.host = switch, switch.host
        return controller

    @property
    def control(self) -> Path:
        """ovn-controller takes no --unixctl: its socket is named by its pid, in OVN_RUNDIR."""
        return self.run_dir / f"ovn-controller.{self.daemon_pid}.ctl"

    def spawn(self, program: str, *args: str) -> None:
        self._spawn(in_namespace(self.host, [
            program, *args, f"--pidfile={self.pidfile}", *self.options]),
            env=environment(self.run_dir), cwd=self.run_dir)

    def status(self) -> str:
        """`connection-status`: "connected" once it follows the southbound database."""
        return appctl(self.control, "connection-status", program="ovn-appctl", timeout=10,
                      check=False).strip()

    def leave(self) -> None:
        """Asks it to exit as a host leaving the cloud does (`exit`): it removes its chassis
        from the southbound database first (a SIGTERM leaves the chassis there, and ML2/OVN
        would go on binding ports to it). Stop it by pid after, to be sure."""
        if self.running():
            appctl(self.control, "exit", program="ovn-appctl", timeout=10, check=False)

    def stop(self) -> None:
        self.leave()
        super().stop()

    def start(self, timeout: float = 60) -> OvnController:
        """Started and connected to the southbound database; stopped if it never is."""
        if shutil.which("ovn-controller") is None:
            raise ServiceUnavailable("ovn-controller is not installed (ovn-host); "
                                     "run: make install")
        self.spawn("ovn-controller", self.switch.connection)
        self.wait_started(timeout)
        try:
            wait_until(lambda: self.status() == "connected", timeout,
                       f"ovn-controller of {self.host.name} (southbound database)")
        except ServiceUnavailable as exc:
            raise self._fail(str(exc)) from None
        return self

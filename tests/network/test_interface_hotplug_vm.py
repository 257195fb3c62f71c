"""Hot-plugging a real guest's Neutron ports through the compute API (compute_cloud.py: the
OVN hypervisor hosts with compute.py, the API on the neutron backend) as a user does it,
with `openstack`: a TCG guest of demo's on the tenant network; `openstack server add port`
of demo's own port on a second network plugs it into the running guest (attachDeviceFlags
of the build's interface XML: a tap on br-int, the port ACTIVE and bound to the guest's
host, a new NIC with the port's MAC inside the guest, seen through ssh from the probe);
`openstack server add network` makes a port there for it; `openstack port list --server`
lists all three; `openstack server remove port` unplugs the user's port (kept, unbound)
and `server remove network` the made one (deleted); a port added to the stopped guest is
in its definition only and comes up with its start; `openstack server add/remove security
group` changes the groups on the guest's ports in Neutron. Instance actions record
attach_interface and detach_interface.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest

from etcd_compute.neutron import NeutronClient
from tests.network.compute_cloud import ComputeCloud
from tests.network.guests import keypair, ready, ssh
from tests.network.neutron import DEMO, Cli
from tests.support import unavailable, wait_for
from tools.local_services.netns import Host
from tools.local_services.ovn_hypervisors import OvnHypervisors

pytestmark = [pytest.mark.vm, pytest.mark.timeout(900)]


def guest(compute_cloud: ComputeCloud, hosts: OvnHypervisors, tenant: dict[str, Any],
          key: Path, name: str) -> tuple[str, str, str]:
    """A server of demo's on the tenant network, ACTIVE and booted: (uuid, host, IP)."""
    session = compute_cloud.session("demo")
    session.post(f"{compute_cloud.api.endpoint}/os-keypairs", raise_exc=False, json={
        "keypair": {"name": "hotplug", "public_key": Path(f"{key}.pub").read_text().strip()}})
    uuid = compute_cloud.boot("demo", name, [{"uuid": tenant["id"]}], key_name="hotplug")
    shown = compute_cloud.wait_status(uuid)
    host = compute_cloud.server(uuid)["OS-EXT-SRV-ATTR:host"]
    ready(hosts[host], uuid)
    (address,) = [a["addr"] for a in shown["addresses"]["tenant"]]
    return uuid, host, address


def test_openstack_adds_and_removes_ports_of_a_running_guest(
        compute_cloud: ComputeCloud, hosts: OvnHypervisors, tenant: dict[str, Any],
        openstack: Cli, neutron: NeutronClient, prober: Host, tmp_path: Path) -> None:
    if shutil.which("ssh") is None:
        unavailable("ssh is missing (tools/install.sh installs openssh-client)")
    key = keypair(tmp_path / "id_guest")
    uuid, host, address = guest(compute_cloud, hosts, tenant, key, "plugged")
    (first,) = neutron.ports(device_id=uuid)
    second = openstack(DEMO, "network", "create", "second")
    try:
        openstack(DEMO, "subnet", "create", "--network", second["id"], "--subnet-range",
                  "10.1.0.0/24", "second-subnet")
        mine = openstack(DEMO, "port", "create", "--network", second["id"], "mine")

        # The user's port, plugged into the running guest.
        openstack.ok(DEMO, "server", "add", "port", uuid, mine["id"])
        port = neutron.port(mine["id"])
        assert (port["device_id"], port["binding:host_id"], port["status"]) == (
            uuid, host, "ACTIVE"), port
        assert f"tap{mine['id'][:11]}" in hosts[host].br_int_ports()
        links = ssh(prober, key, tmp_path / "known_hosts", address, "ip -o link")
        assert links.returncode == 0, links.stderr
        assert mine["mac_address"] in links.stdout, links.stdout

        # A port made for it on a network.
        openstack.ok(DEMO, "server", "add", "network", uuid, second["id"])
        listed = openstack(DEMO, "port", "list", "--server", uuid)
        assert len(listed) == 3, listed
        (made,) = [p for p in listed if p["ID"] not in (first["id"], mine["id"])]
        assert neutron.port(made["ID"])["status"] == "ACTIVE"

        # Unplugged: the user's port kept and unbound, the made one deleted.
        openstack.ok(DEMO, "server", "remove", "port", uuid, mine["id"])
        wait_for(lambda: neutron.port(mine["id"])["device_id"] == "", timeout=120,
                 interval=1, what="the user's port unbound")
        assert f"tap{mine['id'][:11]}" not in hosts[host].br_int_ports()
        compute_cloud.wait_status(uuid)
        openstack.ok(DEMO, "server", "remove", "network", uuid, second["id"])
        wait_for(lambda: [p["id"] for p in neutron.ports(device_id=uuid)] == [first["id"]],
                 timeout=120, interval=1, what="the made port deleted")
        links = ssh(prober, key, tmp_path / "known_hosts", address, "ip -o link")
        assert mine["mac_address"] not in links.stdout, links.stdout

        # A stopped guest: its definition only; the port comes up with its next start.
        openstack.ok(DEMO, "server", "stop", uuid)
        compute_cloud.wait_status(uuid, "SHUTOFF")
        openstack.ok(DEMO, "server", "add", "port", uuid, mine["id"])
        assert neutron.port(mine["id"])["device_id"] == uuid
        assert f"tap{mine['id'][:11]}" not in hosts[host].br_int_ports()
        openstack.ok(DEMO, "server", "start", uuid)
        compute_cloud.wait_status(uuid)
        wait_for(lambda: neutron.port(mine["id"])["status"] == "ACTIVE", timeout=120,
                 interval=1, what="the port plugged while stopped ACTIVE once started")
        assert f"tap{mine['id'][:11]}" in hosts[host].br_int_ports()

        actions = json.loads(openstack.ok(DEMO, "server", "event", "list", uuid, "-f",
                                          "json"))
        names = [a["Action"] for a in actions]
        assert names.count("attach_interface") == 3 and names.count("detach_interface") == 2

        # Security groups: on the guest's ports in Neutron.
        group = openstack(DEMO, "security", "group", "create", "hotplug-web")
        compute_cloud.wait_status(uuid)
        openstack.ok(DEMO, "server", "add", "security", "group", uuid, "hotplug-web")
        assert group["id"] in neutron.port(first["id"])["security_groups"]
        shown = openstack(DEMO, "server", "show", uuid)
        assert "hotplug-web" in json.dumps(shown["security_groups"])
        openstack.ok(DEMO, "server", "remove", "security", "group", uuid, "hotplug-web")
        assert group["id"] not in neutron.port(first["id"])["security_groups"]
    finally:
        openstack.run(DEMO, "port", "delete", "mine")
        openstack.run(DEMO, "security", "group", "delete", "hotplug-web")
        compute_cloud.session("admin").delete(f"{compute_cloud.api.endpoint}/servers/{uuid}",
                                              raise_exc=False)
        wait_for(lambda: not neutron.ports(device_id=uuid), timeout=120, interval=1,
                 what="the server's ports gone")
        openstack.run(DEMO, "network", "delete", second["id"])

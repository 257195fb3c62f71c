"""Real guests on Neutron ports (network.backend neutron): the compute's worker builds each
on a hypervisor host that is both a private libvirtd and an OVN chassis
(tools/local_services/ovn_hypervisors.py), on a tenant network demo made through Neutron.

The worker (compute/worker.py, as compute.py's pool runs it) makes the guest's port as the
service user for demo's project, bound to its host, and the libvirt driver plugs it as
Nova's does (an OVS virtualport on br-int: libvirt's own ovs-vsctl, on that host's
switch); the build ends once Neutron says the port is ACTIVE. One TCG test guest on each of
two hosts: from a probe on the same network (a Neutron port plugged as an OVS internal port
into a namespace of its own, as tests/network/test_ports_on_ovn_chassis.py does), `ssh`
into guest A with the key of its config drive runs busybox `ping` of guest B, across the
Geneve tunnel between the hosts. Destroyed, the guests leave no port in Neutron and no tap
on br-int. A build naming another project's network or port fails in one line and leaves
no port and no domain; a user's own port carries a guest and is kept, unbound, after it; a
Neutron outage during a build fails it, and its port goes once Neutron is back. Create to
ready with a Neutron port, and with the libvirt NAT network on the same host, are printed
(pytest -s).
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import shutil
import subprocess
import time
import urllib.parse
import uuid as uuidlib
from pathlib import Path
from typing import Any

import libvirt
import pytest

from etcd_compute.compute import worker
from etcd_compute.config import deep_merge
from etcd_compute.errors import RequestError, ServiceUnavailable
from etcd_compute.neutron import NeutronClient
from tests.network.guests import (
    HOSTS,
    Worker,
    keypair,
    libvirt_network_on,
    ready,
    sb_chassis_of,
    spec_for,
    ssh,
)
from tests.network.neutron import ALT, DEMO, Cli
from tests.support import unavailable, wait_for
from tools.local_services.netns import Host, ip
from tools.local_services.networking import NetworkStack
from tools.local_services.ovn_hypervisors import OvnHypervisor, OvnHypervisors
from tools.local_services.private_libvirt import PrivateLibvirtd
from tools.local_services.proxy import CuttableProxy

pytestmark = pytest.mark.vm


# Two TCG guests booted side by side (60-120 s each on a loaded machine), one more on the
# libvirt network for the comparison.
@pytest.mark.timeout(900)
def test_guests_on_two_hosts_reach_each_other_over_geneve_and_leave_no_port(
        network: NetworkStack, hosts: OvnHypervisors, workers: dict[str, Worker],
        tenant: dict[str, Any], neutron: NeutronClient, guest_image: str, prober: Host,
        tmp_path: Path) -> None:
    if shutil.which("ssh") is None or shutil.which("ssh-keygen") is None:
        unavailable("ssh and ssh-keygen are missing (tools/install.sh installs openssh-client)")
    key = keypair(tmp_path / "id_guest")
    project = tenant["project_id"]
    specs = {name: spec_for(hosts[name], guest_image, project,
                            networks=[{"uuid": tenant["id"]}],
                            ssh_key=(tmp_path / "id_guest.pub").read_text().strip())
             for name in HOSTS}
    began = time.monotonic()
    building = {name: workers[name].build(spec) for name, spec in specs.items()}
    try:
        results = {name: future.result(timeout=400) for name, future in building.items()}
        built = time.monotonic() - began
        to_ready = {}
        for name, spec in specs.items():
            ready(hosts[name], spec["uuid"])
            to_ready[name] = time.monotonic() - began
        addresses = {}
        for name, spec in specs.items():
            (port_id,) = results[name]["ports"]
            port = neutron.port(port_id)
            assert port["status"] == "ACTIVE", port
            assert port["binding:host_id"] == name
            assert port["device_id"] == spec["uuid"]
            assert port["device_owner"] == "compute:nova"
            assert port["project_id"] == project
            assert sb_chassis_of(network, port_id) == name
            assert f"tap{port_id[:11]}" in hosts[name].br_int_ports()
            addresses[name] = results[name]["ip"]
            assert addresses[name] == port["fixed_ips"][0]["ip_address"]
            assert f"ip={addresses[name]}" in hosts[name].console(spec["uuid"])

        # One ping first, answered or not: the first packet waits on ARP and, on the
        # userspace datapath, on its flows' upcalls (under load it was lost once in 3).
        pinged = ssh(prober, key, tmp_path / "known_hosts", addresses["hv1"],
                     f"ping -c 1 -W 5 {addresses['hv2']} >/dev/null; "
                     f"ping -c 3 -W 2 {addresses['hv2']}")
        assert pinged.returncode == 0, (pinged.stdout, pinged.stderr,
                                        hosts["hv1"].console(specs["hv1"]["uuid"])[-2000:])
        assert " 0% packet loss" in pinged.stdout, pinged.stdout
    finally:
        for name, spec in specs.items():
            concurrent.futures.wait([building[name]], timeout=400)
            workers[name].destroy(spec["uuid"])
    for name, spec in specs.items():
        assert neutron.ports(device_id=spec["uuid"]) == []
        assert f"tap{results[name]['ports'][0][:11]}" not in hosts[name].br_int_ports()
        assert spec["uuid"] not in hosts[name].domains()
    assert [p["id"] for p in neutron.ports(network_id=tenant["id"])
            if p["device_owner"].startswith("compute:")] == []

    # One guest at a time on hv1, on a Neutron port and on a libvirt NAT network (backend
    # libvirt) in turn, for the figures: create to ready, each twice.
    alone = compared(hosts["hv1"], workers["hv1"], guest_image, tenant)
    print(f"\nbuild (port made, guest defined and started, port ACTIVE): {built:.1f} s for "
          "both; create to ready on a Neutron port, two side by side: "
          + ", ".join(f"{name} {seconds:.1f} s" for name, seconds in to_ready.items())
          + "; one at a time: " + ", ".join(
              f"{kind} {' '.join(f'{s:.1f}' for s in times)} s"
              for kind, times in alone.items())
          + "\nping over Geneve: " + pinged.stdout.strip().splitlines()[-1])


def timed(runner: Worker, host: OvnHypervisor, spec: dict[str, Any]) -> float:
    """Seconds from the build job to the guest's ready marker; destroyed after."""
    try:
        began = time.monotonic()
        runner.build(spec).result(timeout=400)
        ready(host, spec["uuid"])
        return time.monotonic() - began
    finally:
        runner.destroy(spec["uuid"])


def compared(host: OvnHypervisor, on_ports: Worker, image: str,
             tenant: dict[str, Any]) -> dict[str, list[float]]:
    """Create to ready of one guest on a Neutron port of `tenant` and of one on a libvirt
    NAT network of `host`'s (made and removed here, built by a worker of the libvirt
    backend), in turn, twice each."""
    name, bridge = "etcd-compute-nat", f"ecn{uuidlib.uuid4().hex[:8]}"
    ip("-n", host.chassis.space.netns, "addr", "replace", "169.254.169.254/32", "dev", "lo")
    libvirt_network_on(host, name, "192.168.127.0/24", bridge)
    config = deep_merge(host.config, {"network": {"backend": "libvirt"}, "driver": {
        "libvirt": {"network": name, "network_cidr": "192.168.127.0/24"}}})
    nat = Worker(config)
    times: dict[str, list[float]] = {"Neutron port": [], "libvirt network": []}
    try:
        for _ in range(2):
            times["Neutron port"].append(timed(on_ports, host, spec_for(
                host, image, tenant["project_id"], networks=[{"uuid": tenant["id"]}])))
            times["libvirt network"].append(timed(nat, host, spec_for(host, image, "p")))
        return times
    finally:
        nat.close()
        remove_network(host.libvirtd, name)


def remove_network(libvirtd: PrivateLibvirtd, name: str) -> None:
    connection = libvirt.open(libvirtd.uri)
    try:
        net = connection.networkLookupByName(name)
        if net.isActive():
            net.destroy()
        net.undefine()
    finally:
        connection.close()


def test_a_build_on_another_projects_network_fails_and_leaves_no_port(
        openstack: Cli, hosts: OvnHypervisors, workers: dict[str, Worker],
        tenant: dict[str, Any], neutron: NeutronClient, guest_image: str) -> None:
    theirs = openstack(ALT, "network", "create", "alt-only")
    try:
        openstack(ALT, "subnet", "create", "--network", theirs["id"], "--subnet-range",
                  "10.9.0.0/24", "alt-subnet")
        spec = spec_for(hosts["hv1"], guest_image, tenant["project_id"],
                        networks=[{"uuid": tenant["id"]}, {"uuid": theirs["id"]}])
        with pytest.raises(RequestError) as refused:
            workers["hv1"].build(spec).result(timeout=120)
        assert str(refused.value) == f"network {theirs['id']} not found"
        # The port made on demo's own network first is gone with the refusal.
        assert neutron.ports(device_id=spec["uuid"]) == []
        assert spec["uuid"] not in hosts["hv1"].domains()
        workers["hv1"].destroy(spec["uuid"])  # the cleanup after a failed build: nothing

        # Nor a port of theirs, even on a network demo may use: "not found", left alone.
        their_port = openstack(ALT, "port", "create", "--network", theirs["id"], "alt-port")
        spec = spec_for(hosts["hv1"], guest_image, tenant["project_id"],
                        networks=[{"port": their_port["id"]}])
        with pytest.raises(RequestError) as refused:
            workers["hv1"].build(spec).result(timeout=120)
        assert str(refused.value) == f"port {their_port['id']} not found"
        after = neutron.port(their_port["id"])
        assert (after["device_id"], after["binding:host_id"]) == ("", "")
        assert after["revision_number"] == their_port["revision_number"]
    finally:
        openstack.run(ALT, "network", "delete", theirs["id"])


@pytest.mark.timeout(600)
def test_a_users_own_port_carries_the_guest_and_is_kept_unbound_after(
        openstack: Cli, hosts: OvnHypervisors, workers: dict[str, Worker],
        tenant: dict[str, Any], neutron: NeutronClient, guest_image: str,
        prober: Host) -> None:
    """demo's own port, named in the request: bound to hv2 for the guest, ACTIVE, the
    guest answers on its address; destroyed, the guest leaves it unbound, not deleted."""
    own = openstack(DEMO, "port", "create", "--network", tenant["id"], "own-port")
    try:
        spec = spec_for(hosts["hv2"], guest_image, tenant["project_id"],
                        networks=[{"port": own["id"]}])
        try:
            result = workers["hv2"].build(spec).result(timeout=400)
            assert result["ports"] == [own["id"]]
            bound = neutron.port(own["id"])
            assert (bound["status"], bound["binding:host_id"], bound["device_id"]) == \
                ("ACTIVE", "hv2", spec["uuid"])
            address = own["fixed_ips"][0]["ip_address"]
            assert result["ip"] == address
            ready(hosts["hv2"], spec["uuid"])
            pinged = subprocess.run(["ip", "netns", "exec", prober.netns, "busybox", "ping",
                                     "-c", "3", "-W", "2", address], capture_output=True,
                                    text=True, timeout=60, check=False)
            assert pinged.returncode == 0, pinged.stdout + pinged.stderr
        finally:
            workers["hv2"].destroy(spec["uuid"])
        kept = neutron.port(own["id"])
        assert (kept["device_id"], kept["device_owner"], kept["binding:host_id"]) == \
            ("", "", "")
        assert f"tap{own['id'][:11]}" not in hosts["hv2"].br_int_ports()
    finally:
        openstack.run(DEMO, "port", "delete", own["id"])


@pytest.mark.timeout(600)
def test_a_neutron_outage_during_a_build_fails_it_and_its_ports_go_once_neutron_is_back(
        hosts: OvnHypervisors, tenant: dict[str, Any], neutron: NeutronClient,
        neutron_settings: dict[str, Any], guest_image: str) -> None:
    """Neutron cut off (a proxy in front of it) once the build made the guest's port: the
    build fails in one line (the port never seen up); its cleanup, Neutron still down,
    fails too and keeps the ledger; once Neutron is back the destroy a reconcile runs
    (worker.port_ledgers names the instance) deletes the port."""
    host = hosts["hv1"]
    endpoint = urllib.parse.urlsplit(neutron_settings["endpoint"])
    proxy = CuttableProxy("127.0.0.1", int(endpoint.port or 443)).start()
    cut_off = Worker(deep_merge(host.config, {"network": {"neutron": {
        "endpoint": f"{endpoint.scheme}://127.0.0.1:{proxy.port}"}}}))
    spec = spec_for(host, guest_image, tenant["project_id"], networks=[{"uuid": tenant["id"]}])
    try:
        building = cut_off.build(spec)
        wait_for(lambda: neutron.ports(device_id=spec["uuid"]), timeout=120, interval=0.02,
                 what="the build's port")
        proxy.cut()
        with pytest.raises(ServiceUnavailable) as failed:
            building.result(timeout=300)
        assert "Neutron" in str(failed.value) and "\n" not in str(failed.value)
        with pytest.raises(ServiceUnavailable):
            cut_off.destroy(spec["uuid"])  # the failed build's cleanup: the guest goes
        assert spec["uuid"] not in host.domains()
        assert cut_off.pool.submit(worker.port_ledgers).result() == {spec["uuid"]}
        proxy.restore()
        cut_off.destroy(spec["uuid"])  # what the reconcile does with a ledger left
        assert neutron.ports(device_id=spec["uuid"]) == []
        assert cut_off.pool.submit(worker.port_ledgers).result() == set()
    finally:
        proxy.restore()
        with contextlib.suppress(Exception):
            cut_off.destroy(spec["uuid"])
        cut_off.close()
        proxy.stop()

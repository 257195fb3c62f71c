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
on br-int. A build naming another project's network fails in one line and leaves no port
and no domain. Create to ready with a Neutron port, and with the libvirt NAT network on the
same host, are printed (pytest -s).
"""

from __future__ import annotations

import concurrent.futures
import multiprocessing
import shutil
import subprocess
import time
import uuid as uuidlib
import xml.etree.ElementTree as ET
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import libvirt
import pytest

from etcd_compute.compute import worker
from etcd_compute.config import deep_merge
from etcd_compute.errors import RequestError, ServiceUnavailable
from etcd_compute.neutron import NeutronClient
from etcd_compute.virt import network as libvirt_network
from tests.compute.helpers import wait_state
from tests.conftest import DaemonProcess
from tests.network.neutron import ALT, DEMO, Cli
from tests.support import make_spec, unavailable, wait_for
from tests.virt.conftest import GUEST_CACHE, VM_TEST_ROOT
from tools.local_services import KeystoneServer, cloud
from tools.local_services.netns import Host, ip, netns_usable
from tools.local_services.networking import NetworkStack
from tools.local_services.ovn_hypervisors import OvnHypervisor, OvnHypervisors
from tools.local_services.private_libvirt import PrivateLibvirtd

pytestmark = pytest.mark.vm

HOSTS = ["hv1", "hv2"]
CIDR = "10.0.0.0/24"
PROBE_IP = "10.0.0.250"
ADMIN = "etcd-compute"
RESOURCES = {"VCPU": 1, "MEMORY_MB": 128, "DISK_GB": 1}
READY = "ETCD-COMPUTE-GUEST ready"


def build_test_guest() -> Path:
    done = subprocess.run(["bash", "tools/build-test-guest.sh"], capture_output=True,
                          text=True, timeout=600, check=False)
    if done.returncode != 0:
        unavailable(f"tools/build-test-guest.sh failed: {done.stderr.strip()[-500:]}")
    return Path(done.stdout.strip().splitlines()[-1])


@pytest.fixture(scope="module")
def neutron_settings(network: NetworkStack, keystone_server: KeystoneServer
                     ) -> dict[str, Any]:
    """The hosts' `network.neutron`: Neutron as the `etcd-compute` service user."""
    verify = network.neutron.verify
    return {"endpoint": network.neutron.endpoint,
            "ca_cert": verify if isinstance(verify, str) else None, "timeout": 30.0,
            "keystone": cloud.service_credentials(keystone_server),
            "integration_bridge": "br-int", "vif_plugging_timeout": 120,
            "vif_plugging_is_fatal": True}


@pytest.fixture(scope="module")
def hosts(network: NetworkStack, neutron_settings: dict[str, Any]) -> Iterator[OvnHypervisors]:
    why = netns_usable()
    if why:
        unavailable(why)
    image = build_test_guest()
    try:
        with OvnHypervisors.create(HOSTS, VM_TEST_ROOT, network.ovn,
                                   sorted({str(GUEST_CACHE), str(image.parent)}),
                                   neutron_settings) as made:
            yield made
    except ServiceUnavailable as exc:
        unavailable(str(exc))


@pytest.fixture(scope="module")
def guest_image() -> str:
    return f"file://{build_test_guest()}"


@pytest.fixture(scope="module")
def tenant(openstack: Cli) -> Iterator[dict[str, Any]]:
    """demo's network and subnet. (Its gateway, on no router, answers nothing; without one
    ML2/OVN serves no DHCP unless it has a metadata port.)"""
    made = openstack(DEMO, "network", "create", "tenant")
    try:
        made["subnet"] = openstack(DEMO, "subnet", "create", "--network", made["id"],
                                   "--subnet-range", CIDR, "tenant-subnet")
        yield made
    finally:
        openstack.run(DEMO, "network", "delete", made["id"])


@pytest.fixture(scope="module")
def neutron(neutron_settings: dict[str, Any]) -> NeutronClient:
    return NeutronClient(neutron_settings)


class Worker:
    """A host's worker process, as compute.py's pool has it (worker.init_worker with the
    host's config): build and destroy run there."""

    def __init__(self, config: dict[str, Any]):
        self.pool = concurrent.futures.ProcessPoolExecutor(
            1, mp_context=multiprocessing.get_context("spawn"),
            initializer=worker.init_worker, initargs=(config,))

    def build(self, spec: dict[str, Any]) -> concurrent.futures.Future[dict[str, Any]]:
        return self.pool.submit(worker.build, spec)

    def destroy(self, uuid: str) -> None:
        self.pool.submit(worker.destroy, uuid).result(timeout=120)

    def close(self) -> None:
        self.pool.shutdown(wait=True, cancel_futures=True)


@pytest.fixture(scope="module")
def workers(hosts: OvnHypervisors) -> Iterator[dict[str, Worker]]:
    made = {name: Worker(host.config) for name, host in hosts.hosts.items()}
    try:
        yield made
    finally:
        for one in made.values():
            one.close()


def keypair(path: Path) -> Path:
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(path)],
                   check=True)
    return path


def spec_for(host: OvnHypervisor, image: str, project_id: str, **extra: Any) -> dict[str, Any]:
    uuid = str(uuidlib.uuid4())
    return make_spec(str(uuidlib.uuid5(uuidlib.NAMESPACE_DNS, host.name)), image, uuid=uuid,
                     name=f"guest-{host.name}", resources=dict(RESOURCES),
                     project_id=project_id, **extra)


def ready(host: OvnHypervisor, uuid: str, timeout: float = 240) -> str:
    return wait_for(lambda: (lambda text: text if READY in text else None)(
        host.console(uuid)), timeout=timeout, interval=0.5, what=f"{uuid}'s ready marker")


def probe(openstack: Cli, hosts: OvnHypervisors, net: dict[str, Any]) -> tuple[Any, Host]:
    """A port of demo's on `net` bound to hv1, plugged there as an OVS internal port and
    moved into a namespace of its own with its fixed IP: a machine on the tenant network,
    in demo's default security group (whose members reach each other). It also stands in
    for the subnet's gateway, which no router holds here, and refuses the metadata address
    behind it at once (as the libvirt network's hosts do): the guests do not wait out
    their metadata retries."""
    gateway = net["subnet"]["gateway_ip"]
    port = openstack(ADMIN, "port", "create", "--network", net["id"], "--project",
                     net["project_id"], "--host", "hv1", "--device-owner", "probe",
                     "--fixed-ip", f"subnet={net['subnet']['id']},ip-address={PROBE_IP}",
                     "--allowed-address", f"ip-address={gateway}",
                     "--allowed-address", "ip-address=169.254.169.254", "probe")
    chassis = hosts["hv1"].chassis
    device = chassis.plug(port["id"], port["mac_address"])
    space = hosts.chassis.net.add_space("probe")
    chassis.move(device, space, PROBE_IP, net["mtu"])
    ip("-n", space.netns, "addr", "add", f"{gateway}/24", "dev", device)
    ip("-n", space.netns, "addr", "add", "169.254.169.254/32", "dev", "lo")
    ip("-n", space.netns, "link", "set", "lo", "up")
    return port, space


@pytest.fixture(scope="module")
def prober(openstack: Cli, hosts: OvnHypervisors, tenant: dict[str, Any],
           neutron_settings: dict[str, Any]) -> Iterator[Host]:
    """The probe (`probe`), up before any guest boots; removed after the module."""
    port, space = probe(openstack, hosts, tenant)
    try:
        client = NeutronClient(neutron_settings)
        wait_for(lambda: client.port(port["id"])["status"] == "ACTIVE" or None,
                 timeout=60, interval=0.2, what="the probe's port ACTIVE")
        yield space
    finally:
        hosts["hv1"].chassis.unplug(f"tap{port['id'][:11]}")
        openstack.run(ADMIN, "port", "delete", port["id"])


def ssh(space: Host, key: Path, known_hosts: Path, address: str,
        command: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["ip", "netns", "exec", space.netns, "ssh", "-F", "none", "-i", str(key),
         "-o", "IdentitiesOnly=yes", "-o", "IdentityAgent=none", "-o", "BatchMode=yes",
         "-o", "ConnectTimeout=20", "-o", "StrictHostKeyChecking=accept-new",
         "-o", f"UserKnownHostsFile={known_hosts}", f"root@{address}", command],
        capture_output=True, text=True, timeout=90, check=False)


def sb_chassis_of(network: NetworkStack, port_id: str) -> str:
    sbctl = ["ovn-sbctl", f"--db={network.ovn.sb.unix_connection}", "--bare"]
    row = subprocess.run([*sbctl, "--columns=chassis", "find", "Port_Binding",
                          f"logical_port={port_id}"], capture_output=True, text=True,
                         check=True, timeout=30).stdout.strip()
    if not row:
        return ""
    return subprocess.run([*sbctl, "get", "Chassis", row, "hostname"], capture_output=True,
                          text=True, check=True, timeout=30).stdout.strip().strip('"')


def libvirt_network_on(host: OvnHypervisor, name: str, cidr: str, bridge: str) -> None:
    """A libvirt NAT network on `host`'s libvirtd, its bridge named for this run (the
    driver's `ip` commands, run in the root namespace, change nothing of the machine's)."""
    xml = ET.fromstring(libvirt_network.network_xml(name, cidr))
    element = xml.find("bridge")
    assert element is not None
    element.set("name", bridge)
    connection = libvirt.open(host.libvirtd.uri)
    try:
        connection.networkDefineXML(ET.tostring(xml, encoding="unicode")).create()
    finally:
        connection.close()


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
    results = {name: future.result(timeout=400) for name, future in building.items()}
    built = time.monotonic() - began
    to_ready = {}
    for name, spec in specs.items():
        ready(hosts[name], spec["uuid"])
        to_ready[name] = time.monotonic() - began
    try:
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

        pinged = ssh(prober, key, tmp_path / "known_hosts", addresses["hv1"],
                     f"ping -c 3 -W 2 {addresses['hv2']}")
        assert pinged.returncode == 0, (pinged.stdout, pinged.stderr,
                                        hosts["hv1"].console(specs["hv1"]["uuid"])[-2000:])
        assert " 0% packet loss" in pinged.stdout, pinged.stdout
    finally:
        for name, spec in specs.items():
            workers[name].destroy(spec["uuid"])
    for name, spec in specs.items():
        assert neutron.ports(device_id=spec["uuid"]) == []
        assert not [p for p in hosts[name].br_int_ports() if p.startswith("tap")]
        assert spec["uuid"] not in hosts[name].domains()
    assert [p["id"] for p in neutron.ports(network_id=tenant["id"])
            if p["device_owner"].startswith("compute:")] == []

    # The same guest on the libvirt NAT network of hv1 (network.backend libvirt), for the
    # figures: create to ready, beside the Neutron port's.
    on_nat = nat_guest(hosts["hv1"], guest_image)
    print(f"\nbuild (port made, guest defined and started, port ACTIVE): {built:.1f} s for "
          f"both; create to ready on a Neutron port: "
          + ", ".join(f"{name} {seconds:.1f} s" for name, seconds in to_ready.items())
          + f"; on the libvirt network: {on_nat:.1f} s\nping over Geneve: "
          + pinged.stdout.strip().splitlines()[-1])


def nat_guest(host: OvnHypervisor, image: str) -> float:
    """Seconds from build to ready of a guest on a libvirt NAT network of `host`'s (made
    and removed here), built by a worker of the libvirt backend."""
    name, bridge = "etcd-compute-nat", f"ecn{uuidlib.uuid4().hex[:8]}"
    ip("-n", host.chassis.space.netns, "addr", "replace", "169.254.169.254/32", "dev", "lo")
    libvirt_network_on(host, name, "192.168.127.0/24", bridge)
    config = deep_merge(host.config, {"network": {"backend": "libvirt"}, "driver": {
        "libvirt": {"network": name, "network_cidr": "192.168.127.0/24"}}})
    nat = Worker(config)
    spec = spec_for(host, image, "p")
    try:
        began = time.monotonic()
        nat.build(spec).result(timeout=400)
        ready(host, spec["uuid"])
        return time.monotonic() - began
    finally:
        nat.destroy(spec["uuid"])
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
    finally:
        openstack.run(ALT, "network", "delete", theirs["id"])


@pytest.mark.timeout(600)
def test_compute_py_builds_a_guest_on_the_projects_network_and_destroy_deletes_its_port(
        hosts: OvnHypervisors, tenant: dict[str, Any], neutron: NeutronClient,
        guest_image: str, prober: Host, store: Any, placement: Any, host_config: Any,
        write_yaml: Any, schedule_config: dict[str, Any], run_schedule: Any,
        tmp_path: Path) -> None:
    """The real path: schedule.py places a guest for demo's project (no network named:
    the one demo sees) and compute.py, on hv1 (network.backend neutron), builds it on a
    port of that network; ACTIVE with the port's address; a destroy deletes the port."""
    host = hosts["hv1"]
    config = host_config("hv1", compute={
        key: host.config["compute"][key] for key in ("state_dir", "instances_dir")}
        | {"job_timeout_seconds": 240},
        driver=host.config["driver"], network=host.config["network"])
    daemon = DaemonProcess(["compute.py", "--config", str(write_yaml("hv1.yaml", config))],
                           tmp_path / "compute.log").start()
    try:
        rp = config["compute"]["uuid"]
        wait_for(lambda: store.get(store.keys.alive(rp)) or not daemon.alive() and
                 pytest.fail(f"compute.py exited: {daemon.log()[-2000:]}"), 60,
                 what="compute heartbeat")
        as_demo = write_yaml("schedule-demo.yaml", deep_merge(schedule_config, {
            "scheduler": {"project_id": tenant["project_id"]}}))
        began = time.monotonic()
        placed = run_schedule("resources=VCPU:1,MEMORY_MB:128,DISK_GB:1", "--image",
                              guest_image, config=as_demo, timeout=120)
        assert placed.code == 0, placed.stderr
        uuid = placed.stdout.split()[-1]
        record = wait_state(store, uuid, "ACTIVE", "ERROR", timeout=300)
        assert record["state"] == "ACTIVE", (record, daemon.log()[-3000:])
        active = time.monotonic() - began
        ready(host, uuid)
        to_ready = time.monotonic() - began
        (port,) = neutron.ports(device_id=uuid)
        assert port["network_id"] == tenant["id"] and port["binding:host_id"] == "hv1"
        assert port["status"] == "ACTIVE"
        assert record["ip"] == port["fixed_ips"][0]["ip_address"]
        assert f"Neutron ports {port['id']}" in daemon.log()
        done = run_schedule("destroy", uuid, "--wait", config=as_demo, timeout=120)
        assert done.code == 0, done.stderr
        assert neutron.ports(device_id=uuid) == []
        assert not [p for p in host.br_int_ports() if p.startswith("tap")]
        print(f"\ncompute.py: schedule.py to ACTIVE {active:.1f} s, to ready {to_ready:.1f} s"
              " (a Neutron port)")
    finally:
        daemon.stop()

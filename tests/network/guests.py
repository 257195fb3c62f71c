"""What the tests of guests on Neutron ports share (test_guests_on_tenant_networks_vm.py,
test_compute_on_neutron_vm.py): two hypervisor hosts that are a private libvirtd and an OVN
chassis each (tools/local_services/ovn_hypervisors.py), as compute hosts of network.backend
neutron; demo's tenant network; a probe on it (a Neutron port plugged as an OVS internal
port into a namespace of its own) that also stands in for the subnet's gateway; the
compute's worker process of each host; reading a guest's console and logging in to it.
The package's conftest.py imports the fixtures.
"""

from __future__ import annotations

import concurrent.futures
import multiprocessing
import subprocess
import uuid as uuidlib
import xml.etree.ElementTree as ET
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import libvirt
import pytest

from etcd_compute.compute import worker
from etcd_compute.errors import ServiceUnavailable
from etcd_compute.neutron import NeutronClient
from etcd_compute.virt import network as libvirt_network
from tests.network.neutron import DEMO, Cli
from tests.support import REPO, make_spec, unavailable, wait_for
from tests.virt.conftest import GUEST_CACHE, VM_TEST_ROOT
from tools.local_services import KeystoneServer, cloud
from tools.local_services.netns import Host, ip, netns_usable
from tools.local_services.networking import NetworkStack
from tools.local_services.ovn_hypervisors import OvnHypervisor, OvnHypervisors

HOSTS = ["hv1", "hv2"]
CIDR = "10.0.0.0/24"
PROBE_IP = "10.0.0.250"
ADMIN = "etcd-compute"
RESOURCES = {"VCPU": 1, "MEMORY_MB": 128, "DISK_GB": 1}
READY = "ETCD-COMPUTE-GUEST ready"


def build_test_guest() -> Path:
    done = subprocess.run(["bash", str(REPO / "tools/build-test-guest.sh")], capture_output=True,
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
    yield from ovn_hypervisors(network, neutron_settings)


def ovn_hypervisors(network: NetworkStack, neutron_settings: dict[str, Any],
                    migration: bool = False) -> Iterator[OvnHypervisors]:
    """hv1 and hv2 for a module's `hosts` fixture; with `migration` their libvirtds also
    listen over TLS (live moves between them)."""
    why = netns_usable()
    if why:
        unavailable(why)
    image = build_test_guest()
    try:
        with OvnHypervisors.create(HOSTS, VM_TEST_ROOT, network.ovn,
                                   sorted({str(GUEST_CACHE), str(image.parent)}),
                                   neutron_settings, migration=migration) as made:
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

    def move(self, kind: str, spec: dict[str, Any], task: dict[str, Any] | None = None
             ) -> concurrent.futures.Future[dict[str, Any]]:
        """A move's step on this host (worker.move, as compute/moves.py submits it)."""
        return self.pool.submit(worker.move, kind, spec, task)

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


def probe(openstack: Cli, hosts: OvnHypervisors, net: dict[str, Any], address: str = PROBE_IP,
          name: str = "probe", project: str | None = None, *more: str,
          gateway: bool = True) -> tuple[Any, Host]:
    """A port of the network's project (or `project`) on `net` at `address`, bound to hv1,
    plugged there as an OVS internal port and moved into a namespace of its own (`name`)
    with its fixed IP: a machine on the network, in that project's default security group
    (whose members reach each other; `more`: other `port create` options, e.g. a
    `--security-group`). Unless `gateway` is False (a router holds it), it also stands in
    for the subnet's gateway, which no router holds here, and refuses the metadata address
    behind it at once (as the libvirt network's hosts do): the guests do not wait out
    their metadata retries."""
    router = net["subnet"]["gateway_ip"]
    stand_in = ["--allowed-address", f"ip-address={router}",
                "--allowed-address", "ip-address=169.254.169.254"] if gateway else []
    port = openstack(ADMIN, "port", "create", "--network", net["id"], "--project",
                     project or net["project_id"], "--host", "hv1", "--device-owner", "probe",
                     "--fixed-ip", f"subnet={net['subnet']['id']},ip-address={address}",
                     *stand_in, *more, name)
    chassis = hosts["hv1"].chassis
    device = chassis.plug(port["id"], port["mac_address"])
    space = hosts.chassis.net.add_space(name)
    chassis.move(device, space, address, net["mtu"])
    if gateway:
        ip("-n", space.netns, "addr", "add", f"{router}/24", "dev", device)
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

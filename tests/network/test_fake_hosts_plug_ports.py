"""A fake-driver host takes Neutron ports too: compute.py with the fake driver on an OVN
chassis in a network namespace (its Open vSwitch and ovn-controller, the chassis' hostname
the compute's name), network.backend neutron with the service credential, and the compute
API (in Keystone's catalog, so Neutron's notifier reaches it) over etcd.

A server made through the API gets a port of its project's network, bound to the host; the
fake driver plugs it on the chassis' `br-int` (`driver.fake.ovsdb`) as libvirt plugs a tap,
OVN binds it, Neutron sets it ACTIVE and sends `network-vif-plugged`, and only then is the
server ACTIVE. Deleting the server deletes its port and unplugs it.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import pytest

from etcd_compute.errors import ServiceUnavailable
from etcd_compute.pki import Pki
from tests.api import conftest as api_fixtures
from tests.api.conftest import IMAGE, Cloud
from tests.network.test_neutron_tells_the_compute_api import handed
from tests.support import unavailable, wait_for
from tools.local_services import KeystoneServer
from tools.local_services import cloud as local_cloud
from tools.local_services.netns import netns_usable
from tools.local_services.networking import NetworkStack
from tools.local_services.ovn_hosts import OvnHosts

keystone = api_fixtures.keystone
glance_section = api_fixtures.glance_section
cloud = api_fixtures.cloud

NAME = "fakehv1"  # the compute's name and its chassis' hostname


def cloud_config(keystone: KeystoneServer, pki: Pki) -> dict[str, Any]:
    """The API and its host on the neutron backend, with the service credential."""
    return {"network": {"backend": "neutron", "neutron": {
        "keystone": local_cloud.service_credentials(keystone), "ca_cert": str(pki.ca_cert),
        "vif_plugging_timeout": 60}}}


def cloud_host(request: pytest.FixtureRequest, config: dict[str, Any]) -> dict[str, Any]:
    """The host named as its chassis, plugging on the chassis' switch."""
    switch = request.getfixturevalue("chassis")[NAME].switch
    return {**config, "compute": {**config["compute"], "name": NAME},
            "driver": {**config["driver"], "fake": {"ovsdb": switch.connection}}}


@pytest.fixture(scope="module")
def chassis(tmp_path_factory: pytest.TempPathFactory, network: NetworkStack
            ) -> Iterator[OvnHosts]:
    why = netns_usable()
    if why:
        unavailable(why)
    try:
        hosts = OvnHosts.create([NAME], tmp_path_factory.mktemp("chassis"), network.ovn)
    except ServiceUnavailable as exc:
        unavailable(str(exc))
    with hosts:
        yield hosts


@pytest.fixture(scope="module")
def demo_network(cloud: Cloud) -> Iterator[str]:
    """demo's one network (10.40.0.0/24), the one its servers get a port of."""
    demo = cloud.connect("demo")
    net = demo.network.create_network(name="fake-hosts-net")
    try:
        demo.network.create_subnet(network_id=net.id, ip_version=4, cidr="10.40.0.0/24")
        yield net.id
    finally:
        admin = cloud.connect("admin")
        for port in admin.network.ports(network_id=net.id):
            if not port.device_owner.startswith("network:"):
                admin.network.delete_port(port)
        demo.network.delete_network(net)


def plugged(chassis: OvnHosts, server: str) -> list[str]:
    """The interfaces on the chassis' switch whose vm-uuid is the server."""
    out = chassis[NAME].switch.vsctl("--bare", "--columns=name", "find", "Interface",
                                     f"external_ids:vm-uuid={server}")
    return out.split()


def test_a_server_on_a_fake_host_is_active_once_its_port_is_and_its_delete_deletes_it(
        cloud: Cloud, chassis: OvnHosts, demo_network: str):
    api, session, admin = cloud.api.endpoint, cloud.session("demo"), cloud.connect("admin")
    began = time.monotonic()
    made = session.post(f"{api}/servers", json={"server": {
        "name": "fake-on-port", "flavorRef": "1", "imageRef": IMAGE}}).json()["server"]
    uuid = made["id"]
    try:
        def status() -> str | None:
            server = session.get(f"{api}/servers/{uuid}").json()["server"]
            return server["status"] if server["status"] in ("ACTIVE", "ERROR") else None

        assert wait_for(status, timeout=120, what="the server ACTIVE") == "ACTIVE", \
            session.get(f"{api}/servers/{uuid}").json()
        active = time.monotonic() - began
        # ACTIVE came after Neutron's network-vif-plugged for its port, which Neutron sends
        # once OVN bound the port the fake driver plugged on the chassis.
        (port,) = admin.network.ports(device_id=uuid)
        assert port.status == "ACTIVE" and port.binding_host_id == NAME
        assert port.network_id == demo_network
        event = handed(cloud, uuid, "network-vif-plugged", port.id)
        assert event is not None and event["status"] == "completed"
        assert plugged(chassis, uuid) == [f"tap{port.id[:11]}"]
        addresses = session.get(f"{api}/servers/{uuid}").json()["server"]["addresses"]
        assert [a["addr"] for net in addresses.values() for a in net] == [
            port.fixed_ips[0]["ip_address"]]
    finally:
        session.delete(f"{api}/servers/{uuid}", raise_exc=False)
    wait_for(lambda: session.get(f"{api}/servers/{uuid}", raise_exc=False).status_code == 404,
             timeout=60, what="the server gone")
    assert list(admin.network.ports(device_id=uuid)) == []
    assert plugged(chassis, uuid) == []
    print(f"\nfake host on a Neutron port: ACTIVE {active:.1f} s after the create")

"""Neutron's own notifier (neutron.conf's [nova], `notify_nova_on_port_*`) tells our compute
API what happens to a server's ports, as it tells Nova, and the API hands each event to the
server's host: the Neutron stack, the compute API (`schedule.py api`, found in Keystone's
catalog as the `compute` service) with a fake-driver compute, and etcd.

A server made through the API; a port of demo's network with device_id = the server and
device_owner compute:nova. Changed (its name): Neutron POSTs `network-changed`. Bound to a
host and plugged on that host's Open vSwitch (an OVN chassis in a network namespace, as
test_ports_on_ovn_chassis.py): it goes ACTIVE and Neutron POSTs `network-vif-plugged`,
status completed, tag the port. Each arrives as the instance's key under its host's prefix
(/hosts/<rp>/external-events/<uuid>), where a build waiting for its ports reads it.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import pytest

from etcd_compute import messages
from tests.api import conftest as api_fixtures
from tests.api.conftest import IMAGE, Cloud
from tests.network.neutron import DEMO, Cli
from tests.network.test_ports_on_ovn_chassis import ADMIN, started_hosts, wait_active
from tests.support import wait_for
from tools.local_services.networking import NetworkStack

# The compute API's cloud (tests/api/conftest.py), beside this package's Neutron stack.
keystone = api_fixtures.keystone
glance_section = api_fixtures.glance_section
cloud = api_fixtures.cloud


@pytest.fixture(scope="module")
def server(cloud: Cloud) -> Iterator[str]:
    """An ACTIVE server of demo's on the cloud's compute."""
    api, session = cloud.api.endpoint, cloud.session("demo")
    made = session.post(f"{api}/servers", json={"server": {
        "name": "plugged", "flavorRef": "1", "imageRef": IMAGE}}).json()["server"]
    uuid = made["id"]
    wait_for(lambda: session.get(f"{api}/servers/{uuid}").json()["server"]["status"]
             == "ACTIVE", timeout=60, what="the server ACTIVE")
    yield uuid
    session.delete(f"{api}/servers/{uuid}", raise_exc=False)


@pytest.fixture
def port(openstack: Cli, server: str) -> Iterator[dict[str, Any]]:
    """A port of a new network of demo's, the server's (as the compute will make it)."""
    net = openstack(DEMO, "network", "create", f"events-{time.monotonic_ns()}")
    try:
        openstack(DEMO, "subnet", "create", "--network", net["id"], "--subnet-range",
                  "10.9.0.0/24", "events-subnet")
        made = openstack(ADMIN, "port", "create", "--network", net["id"], "--device",
                         server, "--device-owner", "compute:nova", "server-port")
        yield made
    finally:
        openstack.run(DEMO, "network", "delete", net["id"])


def handed(cloud: Cloud, server: str, name: str, port: str) -> dict[str, Any] | None:
    """The event `name` about `port` in the server's key on its host, if there."""
    entry = cloud.store.get(cloud.store.keys.external_events(cloud.host, server))
    if entry is None:
        return None
    message = messages.decode(messages.EXTERNAL_EVENTS, entry.value)
    assert message["uuid"] == server
    return next((e for e in message["events"] if e["name"] == name and e.get("tag") == port),
                None)


def test_a_change_of_a_servers_port_reaches_its_host_as_network_changed(
        cloud: Cloud, network: NetworkStack, openstack: Cli, server: str,
        port: dict[str, Any]):
    openstack.ok(ADMIN, "port", "set", "--name", "renamed", port["id"])
    event = wait_for(lambda: handed(cloud, server, "network-changed", port["id"]),
                     timeout=30, what="network-changed in etcd (neutron's log: "
                     f"{network.neutron.run_dir})")
    assert event["status"] == "completed"


def test_a_servers_port_going_active_on_a_chassis_reaches_its_host_as_vif_plugged(
        tmp_path, cloud: Cloud, network: NetworkStack, openstack: Cli, server: str,
        port: dict[str, Any]):
    with started_hosts(tmp_path / "hosts", network) as hosts:
        openstack.ok(ADMIN, "port", "set", "--host", "hv1", port["id"])
        hosts["hv1"].plug(port["id"], port["mac_address"])
        wait_active(openstack, port["id"])
        event = wait_for(lambda: handed(cloud, server, "network-vif-plugged", port["id"]),
                         timeout=30, what="network-vif-plugged in etcd")
        assert event["status"] == "completed"

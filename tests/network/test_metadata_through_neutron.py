"""A guest's metadata through Neutron, as Nova serves it with ML2/OVN: the guest asks
169.254.169.254 on its network; OVN takes it to the network's metadata port on the guest's
own host, in the `ovnmeta-<network>` namespace of Neutron's OVN metadata agent
(tools/local_services/ovn_metadata.py); the agent's haproxy and proxy ask the host's
metadata API, our mdserver in signed mode (tools/local_services/host_mdserver.py), with
X-Instance-ID = the port's device_id, signed with the secret they share.

Two hosts as OVN chassis on one machine (ovn_hosts.py), each with the agent and our
mdserver in its namespace; as demo a network and subnet; as admin a port on each host
with device_id an instance's uuid, plugged there and moved into a namespace of its own
(the guest's stand-in) with its fixed IP. Each guest's stand-in gets its own instance's
meta_data.json from its own host: both agents serve the same network, each with its own
`ovnmeta-<network>` (in the agent's private /run/netns), as two machines' agents do. A
request straight to the mdserver naming the instance without its signature, or with a
wrong one, gets 403. Stopped, an agent leaves no process and no namespace. The first
agent's start, its memory (RSS and PSS of it, its privsep daemons and haproxy) and the
time from ACTIVE to the first answer are printed (pytest -s; METADATA_AGENT=
neutron-ovn-agent runs the same with the other agent, for comparison).
"""

from __future__ import annotations

import hashlib
import hmac
import json
import os
import subprocess
import time
import uuid as uuidlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psutil
import pytest

from etcd_compute.errors import ServiceUnavailable
from etcd_compute.virt.domain import NAMESPACE, NAMESPACE_PREFIX
from etcd_compute.virt.instance_files import InstanceFiles, instance_meta
from tests.network.neutron import DEMO, Cli
from tests.support import unavailable
from tools.local_services import free_port, pid_alive
from tools.local_services.host_mdserver import HostMdserver, http_get, in_host
from tools.local_services.netns import Host, ip, netns_usable
from tools.local_services.networking import NetworkStack
from tools.local_services.ovn_hosts import OvnHosts
from tools.local_services.ovn_metadata import NAMESPACE_PREFIX as OVNMETA
from tools.local_services.ovn_metadata import PROGRAMS, namespaces_in_use

ADMIN = "etcd-compute"
HOSTS = ["hv1", "hv2"]
CIDR = "10.0.0.0/24"
GUEST_ADDRESSES = {"hv1": "10.0.0.31", "hv2": "10.0.0.32"}
METADATA = "http://169.254.169.254"
PROGRAM = os.environ.get("METADATA_AGENT", PROGRAMS[0])


def libvirt_node(path: Path, uuid: str) -> str:
    """A libvirt URI whose hypervisor runs one domain of ours named `uuid`: libvirt's own
    test driver, from a node file. It stands in for the host's libvirtd and the guest's
    domain (this test boots no guest): the mdserver's "is it ours, running, here" is asked
    of it through libvirt as of a real one."""
    path.write_text(
        "<node><domain type='test'>"
        f"<name>{uuid}</name><uuid>{uuid}</uuid><memory>65536</memory>"
        "<os><type>hvm</type></os>"
        f"<metadata><{NAMESPACE_PREFIX}:instance xmlns:{NAMESPACE_PREFIX}='{NAMESPACE}'>"
        f"<{NAMESPACE_PREFIX}:name>guest</{NAMESPACE_PREFIX}:name>"
        f"</{NAMESPACE_PREFIX}:instance></metadata>"
        "</domain></node>")
    return f"test://{path}"


def memory(pids: list[int]) -> tuple[float, float, list[str]]:
    """RSS and PSS (MiB) summed over `pids`, and each process's line."""
    rss = pss = 0.0
    lines = []
    for pid in pids:
        with_pss = psutil.Process(pid).memory_full_info()
        rss += with_pss.rss / 2**20
        pss += with_pss.pss / 2**20
        lines.append(f"{psutil.Process(pid).name()} {with_pss.rss / 2**20:.1f}/"
                     f"{with_pss.pss / 2**20:.1f}")
    return rss, pss, lines


@pytest.fixture
def host_with_agent(tmp_path: Path, network: NetworkStack) -> Iterator[OvnHosts]:
    why = netns_usable()
    if why:
        unavailable(why)
    try:
        # The metadata API's port in the host's own namespace, where nothing else listens.
        hosts = OvnHosts.create(HOSTS, tmp_path / "hosts", network.ovn,
                                metadata_port=free_port(), metadata_program=PROGRAM)
    except ServiceUnavailable as exc:
        unavailable(str(exc))
    with hosts:
        yield hosts


@pytest.fixture
def demo_net(openstack: Cli) -> Iterator[dict[str, Any]]:
    net = openstack(DEMO, "network", "create", "metadata-net")
    try:
        net["subnet"] = openstack(DEMO, "subnet", "create", "--network", net["id"],
                                  "--subnet-range", CIDR, "metadata-subnet")
        yield net
    finally:
        openstack.run(DEMO, "network", "delete", net["id"])


def curl_post(guest: Host, url: str, data: str) -> tuple[int, str]:
    """POST `data` to `url` with curl from inside `guest`'s namespace: (status, body)."""
    done = subprocess.run(in_host(guest, ["curl", "-sS", "--max-time", "30", "-w",
                                          "\n%{http_code}", "--data-binary", data, url]),
                          capture_output=True, text=True, timeout=60, check=True)
    body, _, status = done.stdout.rpartition("\n")
    return int(status), body


def wait_for(check: Any, timeout: float, what: str) -> Any:
    began = time.monotonic()
    while time.monotonic() - began < timeout:
        found = check()
        if found:
            return found
        time.sleep(0.2)
    raise AssertionError(f"{what} within {timeout:.0f} s")


def test_guests_on_two_hosts_get_metadata_through_their_own_agents_and_a_forged_id_gets_403(
        tmp_path: Path, network: NetworkStack, openstack: Cli,
        host_with_agent: OvnHosts, demo_net: dict[str, Any]) -> None:
    hosts = host_with_agent
    agents = {name: hosts[name].metadata for name in HOSTS}
    assert all(agent is not None and agent.running() for agent in agents.values())
    agent = agents[HOSTS[0]]
    assert agent is not None
    started_in = agent.started_in or 0.0
    # What the compute writes when it builds a guest, written here for each guest's
    # stand-in, on its own host.
    uuids = {name: str(uuidlib.uuid4()) for name in HOSTS}
    apis = {}
    try:
        for name in HOSTS:
            instances_dir = tmp_path / f"instances-{name}"
            files = InstanceFiles.of(instances_dir, uuids[name])
            files.create()
            files.write_meta(instance_meta({"uuid": uuids[name], "name": f"guest-{name}"}))
            host_agent = agents[name]
            assert host_agent is not None
            apis[name] = HostMdserver.create(
                tmp_path / f"mdserver-{name}", hosts[name].space, host_agent.api_host,
                host_agent.api_port, instances_dir,
                libvirt_node(tmp_path / f"node-{name}.xml", uuids[name]),
                host_agent.secret_file).start()
        ports = {name: openstack(
            ADMIN, "port", "create", "--network", demo_net["id"], "--host", name,
            "--device-owner", "compute:nova", "--device", uuids[name],
            "--fixed-ip", f"subnet={demo_net['subnet']['id']},"
            f"ip-address={GUEST_ADDRESSES[name]}", f"guest-port-{name}") for name in HOSTS}
        # The network's OVN metadata port (Neutron made it with the subnet): the guests'
        # route to 169.254.169.254, as OVN's DHCP would give it; a localport, answered on
        # each chassis by its own agent.
        metadata_ports = openstack(ADMIN, "port", "list", "--network", demo_net["id"],
                                   "--device-owner", "network:distributed", "--long")
        assert len(metadata_ports) == 1, metadata_ports
        via = metadata_ports[0]["Fixed IP Addresses"][0]["ip_address"]

        guests = {}
        for name in HOSTS:
            host = hosts[name]
            device = host.plug(ports[name]["id"], ports[name]["mac_address"])
            guests[name] = guest = hosts.net.add_space(f"guest-{name}")
            host.move(device, guest, GUEST_ADDRESSES[name], demo_net["mtu"])
            ip("-n", guest.netns, "route", "add", "169.254.169.254/32", "via", via)
        for name in HOSTS:
            wait_for(lambda name=name: openstack.ok(
                ADMIN, "port", "show", ports[name]["id"], "-c", "status", "-f", "value"
            ).strip() == "ACTIVE", 60, f"port on {name} ACTIVE")
        active = time.monotonic()

        def answered(name: str) -> tuple[int, bytes] | None:
            got = http_get(guests[name], f"{METADATA}/openstack/latest/meta_data.json",
                           timeout=15)
            return got if got[0] == 200 else None

        bodies = {}
        first_answer = 0.0
        for name in HOSTS:
            status, bodies[name] = wait_for(lambda name=name: answered(name), 90,
                                            f"an answer to the guest on {name} through "
                                            "its agent")
            first_answer = first_answer or time.monotonic() - active
            document = json.loads(bodies[name])
            assert document["uuid"] == uuids[name] and document["name"] == f"guest-{name}"
            assert http_get(guests[name], f"{METADATA}/latest/meta-data/instance-id")[1] == \
                uuids[name].encode()
            # Its fixed address as the agent names it; no floating IP, no credential: "".
            assert http_get(guests[name], f"{METADATA}/latest/meta-data/local-ipv4") == \
                (200, GUEST_ADDRESSES[name].encode())
            assert http_get(guests[name], f"{METADATA}/latest/meta-data/public-ipv4") == \
                (200, b"")
        # A guest's password, POSTed through its agent as Tempest's guest does (curl: the
        # agent reads a request in one recv, body and headers together): kept in its own
        # instance's directory (no compute here to publish it: answered after the server's
        # wait), once; too long is 400 and nothing is kept.
        password_url = f"{METADATA}/openstack/2013-10-17/password"
        first, second = (InstanceFiles.of(tmp_path / f"instances-{name}", uuids[name])
                         for name in HOSTS)
        assert curl_post(guests[HOSTS[0]], password_url, "p" * 256) == (200, "")
        assert first.read_password() == "p" * 256 and second.read_password() is None
        assert curl_post(guests[HOSTS[0]], password_url, "again") == (
            409, "a password is set already\n")
        assert curl_post(guests[HOSTS[1]], password_url, "x" * 257)[0] == 400
        assert second.read_password() is None and first.read_password() == "p" * 256
        assert http_get(guests[HOSTS[0]], password_url) == (200, b"p" * 256)
        # Each agent has its own namespace of the same name for the network: two.
        space = OVNMETA + demo_net["id"]
        ids = {}
        for name in HOSTS:
            host_agent = agents[name]
            assert host_agent is not None
            ids[name] = host_agent.namespace_ids()
            assert list(ids[name]) == [space]
        assert ids[HOSTS[0]][space] != ids[HOSTS[1]][space]
        assert space not in ip("netns", "list").stdout  # not the machine's names

        # Straight to the mdserver, past the agent: naming the instance is not enough.
        api, uuid, body = apis[HOSTS[0]], uuids[HOSTS[0]], bodies[HOSTS[0]]
        secret = agent.secret_file.read_bytes().strip()
        good = hmac.new(secret, uuid.encode(), hashlib.sha256).hexdigest()
        path = "/openstack/latest/meta_data.json"
        assert api.get(path, {"X-Instance-ID": uuid})[0] == 403
        assert api.get(path, {"X-Instance-ID": uuid, "X-Instance-ID-Signature": "0" * 64}
                       )[0] == 403
        other = hmac.new(b"not the secret", uuid.encode(), hashlib.sha256).hexdigest()
        assert api.get(path, {"X-Instance-ID": uuid, "X-Instance-ID-Signature": other}
                       )[0] == 403
        # ... with its signature it is (what the agent sends), and only for ours: the other
        # host's guest is not this host's.
        assert api.get(path, {"X-Instance-ID": uuid, "X-Instance-ID-Signature": good}) == \
            (200, body)
        for stranger in (str(uuidlib.uuid4()), uuids[HOSTS[1]]):
            signed = hmac.new(secret, stranger.encode(), hashlib.sha256).hexdigest()
            assert api.get(path, {"X-Instance-ID": stranger,
                                  "X-Instance-ID-Signature": signed})[0] == 404
        # A password for the other guest without its signature: refused, nothing kept.
        victim = uuids[HOSTS[1]]
        for forged in ({}, {"X-Instance-ID-Signature": good}):
            assert http_get(hosts[HOSTS[1]].space, apis[HOSTS[1]].url + "/openstack/latest/"
                            "password", {"X-Instance-ID": victim, **forged},
                            data=b"hijacked")[0] == 403
        assert second.read_password() is None

        pids = agent.pids
        rss, pss, lines = memory(pids)
        print(f"\n{PROGRAM}: started in {started_in:.2f} s; first answer "
              f"{first_answer:.2f} s after ACTIVE; {len(pids)} processes, RSS {rss:.1f} MiB, "
              f"PSS {pss:.1f} MiB (RSS/PSS MiB: {', '.join(lines)})")
        for name in HOSTS:
            openstack.ok(ADMIN, "port", "delete", ports[name]["id"])
    finally:
        for started in apis.values():
            started.stop()
    # Stopped, an agent leaves no process (privsep daemons and haproxy included) and no
    # namespace: no process is left in its mount namespace or its ovnmeta- ones.
    pids = [pid for host_agent in agents.values() if host_agent for pid in host_agent.pids]
    inodes = {inode for found in ids.values() for inode in found.values()}
    for host_agent in agents.values():
        assert host_agent is not None
        host_agent.stop()
    assert not [pid for pid in pids if pid_alive(pid)]
    assert not namespaces_in_use(inodes)

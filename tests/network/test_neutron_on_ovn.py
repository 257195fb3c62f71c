"""Neutron with ML2/OVN as the local services start it (tools/local_services/networking.py):
a throwaway MariaDB, OVN's northbound and southbound databases and ovn-northd, Neutron's
API under gunicorn with TLS, in the session Keystone's catalog as `network`.

Through the real `openstack` command line (one long-lived shell per cloud:
tests/openstack_shell.py), a member of project demo makes a network, a subnet, a port and a
security group rule, and OVN's northbound database holds them (a logical switch
`neutron-<network id>`, its port, the rule's ACL in the security group's port group); a
member of alt neither sees nor uses that network; demo's default security group has
Neutron's default rules. A stack started and stopped here leaves no process, socket, port
or database behind. What the stack costs (start, memory, idle CPU) is printed (pytest -s).
"""

from __future__ import annotations

import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psutil
import pytest

from tests.network.neutron import ALT, DEMO, Cli, network_stack
from tests.support import running
from tools.local_services import KeystoneServer, pid_alive, port_open
from tools.local_services.networking import NetworkStack


@pytest.fixture
def demo_network(openstack: Cli) -> Iterator[dict[str, Any]]:
    """A network of demo's with a 10.0.0.0/24 subnet, deleted after the test."""
    made = openstack(DEMO, "network", "create", "demo-net")
    try:
        subnet = openstack(DEMO, "subnet", "create", "--network", made["id"],
                           "--subnet-range", "10.0.0.0/24", "demo-subnet")
        yield {**made, "subnet": subnet}
    finally:
        openstack.run(DEMO, "network", "delete", made["id"])


def switch_ports(network: NetworkStack, net: str) -> set[str]:
    """The names of the logical switch's ports (ML2/OVN names them by Neutron's port ids)."""
    return set(network.ovn.nbctl("--bare", "--columns=name", "find", "Logical_Switch_Port",
                                 f'external_ids:"neutron:network_name"=neutron-{net}').split())


def port_group(security_group_id: str) -> str:
    """The northbound Port_Group ML2/OVN keeps a security group's ACLs in."""
    return "pg_" + security_group_id.replace("-", "_")


def test_a_members_network_subnet_port_and_rule_are_in_ovns_northbound_database(
        network: NetworkStack, openstack: Cli, demo_network: dict[str, Any]) -> None:
    net = demo_network["id"]
    # A geneve network (its type is the admin's to see): 1500 less OVN's geneve overhead.
    assert demo_network["mtu"] == 1442
    assert demo_network["subnet"]["cidr"] == "10.0.0.0/24"
    port = openstack(DEMO, "port", "create", "--network", net, "demo-port")
    [fixed] = port["fixed_ips"]
    assert fixed["ip_address"].startswith("10.0.0.")
    group = openstack(DEMO, "security", "group", "show", "default")
    rule = openstack(DEMO, "security", "group", "rule", "create", "--protocol", "tcp",
                     "--dst-port", "22", "default")
    try:
        # Neutron wrote them to the northbound database as it answered.
        assert f"neutron-{net}" in network.ovn.nbctl("ls-list")
        assert port["id"] in switch_ports(network, net)
        addresses = network.ovn.nbctl("lsp-get-addresses", port["id"])
        assert f"{port['mac_address']} {fixed['ip_address']}" in addresses
        in_group = network.ovn.nbctl("--bare", "--columns=ports", "find", "Port_Group",
                                     f"name={port_group(group['id'])}")
        assert network.ovn.nbctl("--bare", "--columns=_uuid", "find", "Logical_Switch_Port",
                                 f"name={port['id']}").strip() in in_group
        acls = network.ovn.nbctl("acl-list", port_group(group["id"])).splitlines()
        ssh = [acl for acl in acls if "tcp.dst == 22" in acl]
        assert len(ssh) == 1 and "to-lport" in ssh[0] and "allow-related" in ssh[0], acls
        # ovn-northd made the switch's datapath in the southbound database.
        assert wait_for_datapath(network, net)
    finally:
        openstack.ok(DEMO, "security", "group", "rule", "delete", rule["id"])
        openstack.ok(DEMO, "port", "delete", port["id"])
    assert port["id"] not in switch_ports(network, net)
    assert "tcp.dst == 22" not in network.ovn.nbctl("acl-list", port_group(group["id"]))


def wait_for_datapath(network: NetworkStack, net: str, timeout: float = 10) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        done = subprocess.run(["ovn-sbctl", f"--db={network.ovn.sb.connection}", "--bare",
                               "--columns=external_ids", "list", "Datapath_Binding"],
                              capture_output=True, text=True, timeout=30, check=False)
        if f"neutron-{net}" in done.stdout:
            return True
        time.sleep(0.2)
    return False


def test_another_project_neither_sees_nor_uses_a_members_network(
        network: NetworkStack, openstack: Cli, demo_network: dict[str, Any],
        keystone_server: KeystoneServer) -> None:
    net = demo_network["id"]
    assert net not in {n["ID"] for n in openstack(ALT, "network", "list")}
    shown = openstack.run(ALT, "network", "show", net)
    assert shown.returncode == 1 and "No Network found" in shown.stderr
    # The command line looks the network up first and stops at Neutron's 404 ...
    refused = openstack.run(ALT, "port", "create", "--network", net, "alt-port")
    assert refused.returncode == 1 and "No Network found" in refused.stderr
    # ... and Neutron itself refuses the port: the network is not found for alt.
    session = keystone_server.session("alt", project="alt")
    answer = session.post(network.neutron.endpoint + "/v2.0/ports",
                          json={"port": {"network_id": net, "name": "alt-port"}},
                          raise_exc=False)
    assert answer.status_code == 404, answer.text
    assert answer.json()["NeutronError"]["type"] == "NetworkNotFound"
    assert openstack(ALT, "port", "list") == []
    # Nothing of alt's on the network, in Neutron (as the admin sees it) or in OVN.
    # (`port list` shows no project: each port's own. The network's OVN metadata port is
    # the member's project's, as Neutron makes it.)
    ports = openstack("etcd-compute", "port", "list", "--network", net)
    assert {openstack("etcd-compute", "port", "show", port["ID"])["project_id"]
            for port in ports} <= {demo_network["project_id"]}
    assert switch_ports(network, net) == {port["ID"] for port in ports}


def test_the_default_security_group_has_neutrons_default_rules(openstack: Cli) -> None:
    group = openstack(DEMO, "security", "group", "show", "default")
    rules = openstack(DEMO, "security", "group", "rule", "list", "default", "--long")
    assert {(r["Direction"], r["Ethertype"], r["IP Protocol"], r["Remote Security Group"],
             r["IP Range"]) for r in rules} == {
        # Any traffic out; in, only from ports of the same group (the command line shows
        # the whole range for a rule that names a remote group instead).
        ("egress", "IPv4", None, None, "0.0.0.0/0"),
        ("egress", "IPv6", None, None, "::/0"),
        ("ingress", "IPv4", None, group["id"], "0.0.0.0/0"),
        ("ingress", "IPv6", None, group["id"], "::/0"),
    }, rules


def processes(stack: NetworkStack) -> list[psutil.Process]:
    """The stack's processes and their children (gunicorn's worker)."""
    found = [psutil.Process(pid) for pid in stack.pids]
    return found + [child for p in found for child in p.children(recursive=True)]


def test_the_idle_stack_is_small_and_quiet(network: NetworkStack, openstack: Cli) -> None:
    """Printed with pytest -s; bounds far above what was measured (a shared machine)."""
    alive = processes(network)
    rss = {p.pid: p.memory_info().rss for p in alive}
    before = {p.pid: sum(p.cpu_times()[:2]) for p in alive}
    window = 5.0
    time.sleep(window)
    after = {p.pid: sum(p.cpu_times()[:2]) for p in alive}
    idle = {pid: (after[pid] - before[pid]) / window * 100 for pid in after}
    lines = [f"{p.name():>14} {p.pid:>7}: RSS {rss[p.pid] / 2**20:6.1f} MiB, CPU "
             f"{after[p.pid]:5.2f} s since its start, idle {idle[p.pid]:4.1f}%" for p in alive]
    total_rss, total_idle = sum(rss.values()) / 2**20, sum(idle.values())
    timings = ", ".join(f"{name} {seconds:.2f} s" for name, seconds in network.timings.items())
    print(f"\nthe network stack started in: {timings}\n" + "\n".join(lines)
          + f"\n{'total':>14}: RSS {total_rss:.1f} MiB, CPU {sum(after.values()):.2f} s, "
          f"idle {total_idle:.1f}% (over {window:.0f} s)")
    assert total_rss < 1024 and total_idle < 25


def test_a_stopped_stack_leaves_no_process_socket_port_or_database(tmp_path: Path) -> None:
    """On a Keystone of its own (the session's catalog keeps the module's stack)."""
    with running(KeystoneServer.create(tmp_path / "keystone")) as keystone:
        with running(network_stack(tmp_path / "network", keystone, None)) as stack:
            alive = processes(stack)
            assert len(alive) == 6  # mariadbd, 2 ovsdb-servers, ovn-northd, gunicorn, worker
            ports = [stack.mariadb.port, stack.ovn.nb.port, stack.ovn.sb.port,
                     stack.neutron.port]
            home = stack.mariadb.home
            assert home.is_dir() and all(port_open(port) for port in ports)
            assert "network" in catalog(keystone)
        assert not [p.pid for p in alive if pid_alive(p.pid)]
        assert not [port for port in ports if port_open(port)]
        assert not home.exists()
        assert not [p for p in tmp_path.rglob("*") if p.is_socket()]
        assert "network" not in catalog(keystone)


def catalog(keystone: KeystoneServer) -> set[str]:
    """The service types in `keystone`'s catalog."""
    session = keystone.session()
    return {service["type"] for service in
            session.get(keystone.auth_url + "/services").json()["services"]}

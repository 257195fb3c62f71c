"""Projects kept apart on Neutron (issue 32's "Done when", as far as it runs on the netns
hosts with real TCG guests), through the compute API (compute_cloud.py) and `openstack`:

- demo makes a network and subnet; two servers of demo's on it, on two hosts (an
  anti-affinity group), reach each other: `ssh` into one from a probe on the network
  (guests.py) pings the other across the Geneve tunnel;
- a server of alt's on alt's own network, whose subnet has the very same range, reaches
  neither (an alt probe on that network is the way in): the same addresses there are
  nobody;
- on a network the admin shares (`--share`), alt's server cannot reach demo's server until
  demo adds a rule to its default security group that lets the shared range in; then it
  can.

The servers are made with the API's create (the `openstack server create` command line
looks the image up in Glance, which this cloud has none of: its image is the test guest
by file:// URL); networks, subnets and the rule are `openstack`'s. Five guests boot side
by side on the two hosts.
"""

from __future__ import annotations

import re
import secrets
import shutil
from pathlib import Path
from typing import Any

import pytest

from tests.network.compute_cloud import ComputeCloud
from tests.network.guests import ADMIN, keypair, probe, ready, ssh
from tests.network.neutron import ALT, DEMO, Cli
from tests.support import unavailable
from tools.local_services.netns import Host
from tools.local_services.ovn_hypervisors import OvnHypervisors


@pytest.fixture(autouse=True)
def projects_apart() -> None:
    """Names this module's worker group (tests/conftest.py's WORKER_GROUPS): five guests,
    the longest module, on a worker of its own."""


pytestmark = [pytest.mark.vm, pytest.mark.timeout(1200)]


def network(openstack: Cli, cloud_name: str, name: str, cidr: str,
            *more: str, pool: tuple[str, str] | None = None) -> dict[str, Any]:
    made = openstack(cloud_name, "network", "create", *more, name)
    pools = ["--allocation-pool", f"start={pool[0]},end={pool[1]}"] if pool else []
    made["subnet"] = openstack(cloud_name, "subnet", "create", "--network", made["id"],
                               "--subnet-range", cidr, *pools, f"{name}-subnet")
    return dict(made)


def ping(space: Host, key: Path, known: Path, via: str, address: str) -> int:
    """The replies of 3 pings from the server at `via` to `address`. Reached: some come
    back (the first may be lost while the path's ARP and flows settle); apart: none."""
    done = ssh(space, key, known, via, f"ping -c 3 -W 2 {address}")
    counted = re.search(r"^3 packets transmitted, (\d) packets received", done.stdout,
                        re.MULTILINE)
    assert counted, (done.stdout, done.stderr)
    return int(counted[1])


def test_projects_are_apart_until_a_rule_lets_one_in(
        compute_cloud: ComputeCloud, hosts: OvnHypervisors, openstack: Cli,
        tmp_path: Path) -> None:
    if shutil.which("ssh") is None:
        unavailable("ssh is missing (tools/install.sh installs openssh-client)")
    key = keypair(tmp_path / "id_guest")
    public = Path(f"{key}.pub").read_text().strip()
    for user in ("demo", "alt"):
        compute_cloud.session(user).post(f"{compute_cloud.api.endpoint}/os-keypairs", json={
            "keypair": {"name": "apart", "public_key": public}})
    nets: list[tuple[str, str]] = []
    probes: list[tuple[Any, Host]] = []
    try:
        # The same range, but pools apart: Neutron picks addresses at random, and alt's
        # server must never hold the address it is asked to reach (it would answer itself).
        mine = network(openstack, DEMO, "demo-apart", "10.0.0.0/24",
                       pool=("10.0.0.2", "10.0.0.99"))
        nets.append((DEMO, mine["id"]))
        theirs = network(openstack, ALT, "alt-apart", "10.0.0.0/24",
                         pool=("10.0.0.100", "10.0.0.199"))
        nets.append((ALT, theirs["id"]))
        shared = network(openstack, ADMIN, "shared-apart", "10.3.0.0/24", "--share")
        nets.append((ADMIN, shared["id"]))
        alt_project = theirs["project_id"]
        # Names of their own: a rerun in this module meets the last run's namespaces.
        run = secrets.token_hex(2)
        probes.append(probe(openstack, hosts, mine, name=f"apart-demo-{run}"))
        probes.append(probe(openstack, hosts, theirs, name=f"apart-alt-{run}"))
        probes.append(probe(openstack, hosts, shared, "10.3.0.250", f"apart-shared-{run}",
                            project=alt_project))
        (_, demo_in), (_, alt_in), (_, shared_in) = probes

        group = compute_cloud.anti_affinity("demo", "apart")
        servers = {
            "d1": compute_cloud.boot("demo", "d1", [{"uuid": mine["id"]}], group=group,
                                     key_name="apart"),
            "d2": compute_cloud.boot("demo", "d2", [{"uuid": mine["id"]}], group=group,
                                     key_name="apart"),
            "a1": compute_cloud.boot("alt", "a1", [{"uuid": theirs["id"]}],
                                     key_name="apart"),
            "d3": compute_cloud.boot("demo", "d3", [{"uuid": shared["id"]}],
                                     key_name="apart"),
            "a2": compute_cloud.boot("alt", "a2", [{"uuid": shared["id"]}],
                                     key_name="apart"),
        }
        address, where = {}, {}
        for name, uuid in servers.items():
            shown = compute_cloud.wait_status(uuid, timeout=600)
            where[name] = compute_cloud.server(uuid)["OS-EXT-SRV-ATTR:host"]
            (address[name],) = [a["addr"] for found in shown["addresses"].values()
                                for a in found]
        assert where["d1"] != where["d2"], where
        assert address["a1"] not in (address["d1"], address["d2"]), address
        for name, uuid in servers.items():
            ready(hosts[where[name]], uuid, timeout=400)

        # demo's two servers, on two hosts, reach each other.
        demo_known = tmp_path / "known-demo"
        assert ping(demo_in, key, demo_known, address["d1"], address["d2"]) > 0

        # alt's server on alt's own network (the same range) reaches neither.
        alt_known = tmp_path / "known-alt"
        for other in ("d1", "d2"):
            assert ping(alt_in, key, alt_known, address["a1"], address[other]) == 0

        # On the shared network: refused until demo's default group lets the range in.
        shared_known = tmp_path / "known-shared"
        assert ping(shared_in, key, shared_known, address["a2"], address["d3"]) == 0
        openstack(DEMO, "security", "group", "rule", "create", "--ingress", "--protocol",
                  "icmp", "--remote-ip", "10.3.0.0/24", "default")
        assert ping(shared_in, key, shared_known, address["a2"], address["d3"]) > 0
        print(f"\nprojects apart: servers on {where}")
    finally:
        compute_cloud.wait_gone()
        for port, _space in probes:
            hosts["hv1"].chassis.unplug(f"tap{port['id'][:11]}")
            openstack.run(ADMIN, "port", "delete", port["id"])
        rules = openstack.run(DEMO, "security", "group", "rule", "list", "default", "-f",
                              "value", "-c", "ID", "-c", "IP Range")
        for line in rules.stdout.splitlines():
            if "10.3.0.0/24" in line:
                openstack.run(DEMO, "security", "group", "rule", "delete", line.split()[0])
        for cloud_name, net_id in reversed(nets):
            openstack.run(cloud_name, "network", "delete", net_id)

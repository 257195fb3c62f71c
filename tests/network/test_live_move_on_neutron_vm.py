"""A guest on a Neutron port moves live between two hosts that are each an OVN chassis and a
private libvirtd listening over TLS (tools/local_services/ovn_hypervisors.py with
`migration`), its port with it (compute/port_moves.py), through the compute's own steps
(compute/worker.py's `move`, as compute/moves.py submits them: the destination's `prepare`,
the source's `migrate`).

Guest A on hv1 and guest B on hv2 on demo's tenant network; the probe (a Neutron port in a
namespace of its own, bound to hv1) pings A every 0.2 s while A crosses to hv2. A keeps its
port and address; the port's `binding:host_id` and OVN's Port_Binding chassis become hv2;
the pings resume. The pings are tests/network/pinger.py's (no `ping` needed). The loss is
printed (pytest -s): the pings not answered, times 0.2 s.
Destroyed on hv2, A leaves no port; nothing of it is left on hv1.
"""

from __future__ import annotations

import concurrent.futures
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from etcd_compute.compute import worker
from etcd_compute.neutron import NeutronClient
from tests.network.guests import HOSTS, Worker, ovn_hypervisors, ready, sb_chassis_of, spec_for
from tests.network.pinger import tally
from tests.support import REPO, wait_for
from tools.local_services.netns import Host
from tools.local_services.networking import NetworkStack
from tools.local_services.ovn_hypervisors import OvnHypervisors

pytestmark = pytest.mark.vm

INTERVAL = 0.2


@pytest.fixture(scope="module")
def hosts(network: NetworkStack, neutron_settings: dict[str, Any]) -> Iterator[OvnHypervisors]:
    """hv1 and hv2 as guests.py's, their libvirtds also listening over TLS (moves)."""
    yield from ovn_hypervisors(network, neutron_settings, migration=True)


def bindings(neutron: NeutronClient, port_id: str) -> dict[str, str]:
    return {b["host"]: b["status"] for b in neutron.port_bindings(port_id)}


@pytest.mark.timeout(900)
def test_a_guest_moves_live_with_its_port_and_keeps_answering(
        network: NetworkStack, hosts: OvnHypervisors, workers: dict[str, Worker],
        tenant: dict[str, Any], neutron: NeutronClient, guest_image: str, prober: Host,
        tmp_path: Path) -> None:
    project = tenant["project_id"]
    specs = {name: spec_for(hosts[name], guest_image, project,
                            networks=[{"uuid": tenant["id"]}]) for name in HOSTS}
    building = {name: workers[name].build(spec) for name, spec in specs.items()}
    a = specs["hv1"]
    where = "hv1"
    try:
        results = {name: future.result(timeout=400) for name, future in building.items()}
        for name, spec in specs.items():
            ready(hosts[name], spec["uuid"])
        (port_id,) = results["hv1"]["ports"]
        before = neutron.port(port_id)
        address = results["hv1"]["ip"]
        assert before["binding:host_id"] == "hv1" and sb_chassis_of(network, port_id) == "hv1"

        pinging = subprocess.Popen(
            ["ip", "netns", "exec", prober.netns, sys.executable, "-m", "tests.network.pinger",
             address, str(INTERVAL)], cwd=REPO, stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT, text=True)
        output: list[str] = []
        try:
            time.sleep(3)
            # The destination makes room and an inactive binding; the source moves it.
            target = workers["hv2"].move(worker.PREPARE, a).result(timeout=300)
            assert target["ports_host"] == "hv2"
            assert bindings(neutron, port_id) == {"hv1": "ACTIVE", "hv2": "INACTIVE"}
            began = time.monotonic()
            done = workers["hv1"].move(worker.MIGRATE, a, {"live": True, "target": target}
                                       ).result(timeout=600)
            where = "hv2"
            moved_in = time.monotonic() - began
            assert done["figures"]["ports_moved"] == 1, done
            wait_for(lambda: sb_chassis_of(network, port_id) == "hv2" or None, timeout=60,
                     interval=0.2, what="OVN's Port_Binding of the port on hv2")
            time.sleep(5)  # the pings after the move, answered
        finally:
            pinging.send_signal(signal.SIGINT)  # it prints each echo's fate, then ends
            output.append(pinging.communicate(timeout=30)[0])
        sent, unanswered, _longest = tally(output[0])
        answered = sent - unanswered
        tail = [line for line in output[0].splitlines() if "icmp_seq" in line][-10:]
        assert sent > 40 and len(tail) == 10, output[0][-3000:]
        assert all("ttl=" in line for line in tail[-5:]), output[0][-3000:]  # answered again
        after = neutron.port(port_id)
        assert after["id"] == before["id"] and after["mac_address"] == before["mac_address"]
        assert after["fixed_ips"] == before["fixed_ips"]
        assert after["binding:host_id"] == "hv2" and bindings(neutron, port_id) == {
            "hv2": "ACTIVE"}
        assert a["uuid"] in hosts["hv2"].domains() and a["uuid"] not in hosts["hv1"].domains()
        assert f"tap{port_id[:11]}" in hosts["hv2"].br_int_ports()
        assert f"tap{port_id[:11]}" not in hosts["hv1"].br_int_ports()
        loss = (sent - answered) * INTERVAL
        print(f"\nlive move on a Neutron port: {moved_in:.1f} s (libvirt downtime "
              f"{done['figures'].get('downtime_ms')} ms); pings every {INTERVAL:g} s: "
              f"{sent} sent, {sent - answered} unanswered = {loss:.1f} s of loss")
        assert loss < 10, output[0][-3000:]
    finally:
        concurrent.futures.wait(list(building.values()), timeout=400)
        workers[where].destroy(a["uuid"])
        workers["hv2"].destroy(specs["hv2"]["uuid"])
    assert neutron.ports(device_id=a["uuid"]) == []
    assert a["uuid"] not in hosts["hv1"].domains() + hosts["hv2"].domains()

"""compute.py on a host of network.backend neutron (tests/network/guests.py), the whole
path: schedule.py places a guest for demo's project, the compute builds it on a port of
demo's one network (no network named) and ACTIVE is the port's address; a destroy deletes
the port. With Neutron unreachable, a build fails in one line and leaves no port, no
domain and no claim.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from etcd_compute.config import deep_merge
from etcd_compute.neutron import NeutronClient
from tests.compute.helpers import wait_state
from tests.conftest import DaemonProcess
from tests.network.guests import (
    ready,
)
from tests.support import run_cli, wait_for
from tools.local_services import free_port
from tools.local_services.netns import Host
from tools.local_services.ovn_hypervisors import OvnHypervisors

pytestmark = pytest.mark.vm

VIF_WAIT = 20  # seconds the host waits for network-vif-plugged (no API here: see on_hv1)


@pytest.fixture
def on_hv1(hosts: OvnHypervisors, store: Any, placement: Any, host_config: Any,
           write_yaml: Any, tmp_path: Path) -> Callable[..., DaemonProcess]:
    """Starts compute.py for hv1 (network.backend neutron; `neutron` overrides its
    network.neutron section), once its heartbeat is up; stopped after the test.

    Neutron's network-vif-plugged cannot reach this host: its notifier posts to the
    compute API of Keystone's catalog (test_neutron_tells_the_compute_api.py), and no
    compute API runs here (schedule.py alone). Instead, explicitly: the worker still
    polls Neutron until the port is ACTIVE, and the main process waits VIF_WAIT seconds
    for the events, then runs the guest anyway with a warning (vif_plugging_is_fatal
    false), which the test reads."""
    started: list[DaemonProcess] = []

    def start(**neutron: Any) -> DaemonProcess:
        host = hosts["hv1"]
        config = host_config("hv1", compute={
            key: host.config["compute"][key] for key in ("state_dir", "instances_dir")}
            | {"job_timeout_seconds": 240}, driver=host.config["driver"],
            network=deep_merge(host.config["network"], {"neutron": {
                "vif_plugging_timeout": VIF_WAIT, "vif_plugging_is_fatal": False,
                **neutron}}))
        path = str(write_yaml("hv1.yaml", config))
        if not neutron:  # `compute.py --check` says what it found of Neutron
            checked = run_cli("compute.py", "--config", path, "--check", timeout=120)
            assert checked.code == 0, checked.stderr
            assert "neutron: ok (" in checked.stdout and "as hv1)" in checked.stdout
        daemon = DaemonProcess(["compute.py", "--config", path],
                               tmp_path / "compute.log").start()
        started.append(daemon)
        daemon.rp = config["compute"]["uuid"]  # type: ignore[attr-defined]
        wait_for(lambda: store.get(store.keys.alive(daemon.rp)) or  # type: ignore[attr-defined]
                 not daemon.alive() and pytest.fail(f"compute.py exited: {daemon.log()[-2000:]}"),
                 60, what="compute heartbeat")
        return daemon

    yield start  # type: ignore[misc]
    for daemon in started:
        daemon.stop()
        # hv1 is the chassis' name in every module: its provider goes with it.
        with contextlib.suppress(Exception):
            placement.delete_provider(daemon.rp)  # type: ignore[attr-defined]


@pytest.fixture
def as_demo(tenant: dict[str, Any], schedule_config: dict[str, Any], write_yaml: Any) -> Path:
    """schedule.yaml whose requests are demo's project's, on the neutron backend (its
    scheduler asks for the hosts of that backend's trait)."""
    return write_yaml("schedule-demo.yaml", deep_merge(schedule_config, {
        "scheduler": {"project_id": tenant["project_id"]},
        "network": {"backend": "neutron"}}))


def place(run_schedule: Any, as_demo: Path, image: str) -> str:
    placed = run_schedule("resources=VCPU:1,MEMORY_MB:128,DISK_GB:1", "--image", image,
                          config=as_demo, timeout=120)
    assert placed.code == 0, placed.stderr
    return placed.stdout.split()[-1]


@pytest.mark.timeout(600)
def test_compute_py_builds_a_guest_on_the_projects_network_and_destroy_deletes_its_port(
        hosts: OvnHypervisors, tenant: dict[str, Any], neutron: NeutronClient,
        guest_image: str, prober: Host, store: Any, on_hv1: Callable[..., DaemonProcess],
        as_demo: Path, run_schedule: Any) -> None:
    """The real path: schedule.py places a guest for demo's project (no network named:
    the one demo sees) and compute.py, on hv1 (network.backend neutron), builds it on a
    port of that network; ACTIVE with the port's address; a destroy deletes the port."""
    host, daemon = hosts["hv1"], on_hv1()
    began = time.monotonic()
    uuid = place(run_schedule, as_demo, guest_image)
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
    # ACTIVE in Neutron (above); no event without an API: it ran anyway, saying so.
    assert f"port(s) {port['id']} not up within {VIF_WAIT:g} s" in daemon.log()
    done = run_schedule("destroy", uuid, "--wait", config=as_demo, timeout=120)
    assert done.code == 0, done.stderr
    assert neutron.ports(device_id=uuid) == []
    assert f"tap{port['id'][:11]}" not in host.br_int_ports()
    print(f"\ncompute.py: schedule.py to ACTIVE {active:.1f} s, to ready {to_ready:.1f} s"
          " (a Neutron port)")


def test_with_neutron_unreachable_a_build_fails_in_one_line_leaving_no_port_nor_claim(
        hosts: OvnHypervisors, tenant: dict[str, Any], neutron: NeutronClient,
        guest_image: str, store: Any, placement: Any, on_hv1: Callable[..., DaemonProcess],
        as_demo: Path, run_schedule: Any) -> None:
    """Neutron's endpoint answers nothing (a port nobody listens on): the build fails, the
    guest ends in ERROR with Neutron named, and nothing is left: no port, no domain, no
    claim in Placement, no ledger."""
    daemon = on_hv1(endpoint=f"http://127.0.0.1:{free_port()}")
    uuid = place(run_schedule, as_demo, guest_image)
    record = wait_state(store, uuid, "ERROR", "ACTIVE", timeout=120)
    assert record["state"] == "ERROR", record
    assert "Neutron" in record["error"] and "\n" not in record["error"], record["error"]
    assert neutron.ports(device_id=uuid) == []
    assert uuid not in hosts["hv1"].domains()
    wait_for(lambda: not placement.get_allocations(uuid)["allocations"], 30,
             what="the claim freed")
    state_dir = Path(hosts["hv1"].config["compute"]["state_dir"])
    assert not (state_dir / "ports" / f"{uuid}.json").exists()
    assert "Traceback" not in daemon.log()

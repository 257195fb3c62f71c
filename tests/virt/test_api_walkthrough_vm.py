"""The compute API issue's walk-through, with a real guest and the `openstack` command line.

As `etcd-compute-demo` (a member of project demo), through Keystone's catalog, the real
API, Glance and a libvirt compute booting the offline test guest: server create --wait,
list, show, console log show, stop, start, reboot --hard, resize --wait then resize
confirm, rebuild, event list, quota show, limits show --absolute, keypair create, server
group create --policy anti-affinity, delete --wait; `etcd-compute-alt` does not find the
server; as `etcd-compute` (admin): hypervisor list, compute service list, compute service
set --disable (and --enable); `schedule.py list` sees the same instance; Placement holds
nothing of the project after. The compute and its guest are on a hypervisor host of their
own (tools/local_services/hypervisors.py); the commands run in one long-lived `openstack`
per cloud (tests/openstack_shell.py).
"""

from __future__ import annotations

import json
import os
import subprocess
import time
import uuid as uuidlib
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from etcd_compute import messages
from etcd_compute.config import API_DEFAULTS, deep_merge
from etcd_compute.etcd import Store
from etcd_compute.pki import Pki
from etcd_compute.placement import PlacementClient
from tests.openstack_shell import OpenStackShells
from tests.support import REPO, run_cli, unavailable, wait_for
from tests.virt.hypervisors import hypervisors
from tools.local_services import cloud
from tools.local_services.compute_api import ComputeApiServer, seed_flavors
from tools.local_services.glance import GlanceServer
from tools.local_services.hypervisors import ComputeHosts, Hypervisor
from tools.local_services.keystone import KeystoneServer

pytestmark = pytest.mark.vm

OPENSTACK = REPO / ".venv-clients" / "bin" / "openstack"
STEP_TIMEOUT = 300


@dataclass
class Walk:
    shells: OpenStackShells
    image: str
    host: str
    host_name: str
    schedule_yaml: Path
    log: list[str]
    hypervisor: Hypervisor

    def osc(self, cloud_name: str, *args: str, ok: bool = True) -> subprocess.CompletedProcess:
        """`openstack --os-cloud CLOUD ARGS...` with the test's clouds.yaml (one long-lived
        `openstack` shell per cloud runs them: tests/openstack_shell.py)."""
        started = time.monotonic()
        done = self.shells.run(cloud_name, *args, timeout=STEP_TIMEOUT)
        self.log.append(f"$ openstack --os-cloud {cloud_name} {' '.join(args)}  "
                        f"({done.returncode}, {time.monotonic() - started:.1f} s)")
        if ok:
            assert done.returncode == 0, f"{' '.join(args)}: {done.stderr[-2000:]}"
        return done

    def field(self, server: str, name: str) -> str:
        return self.osc("etcd-compute-demo", "server", "show", server, "-f", "value", "-c",
                        name).stdout.strip()

    def wait_status(self, server: str, status: str, timeout: float = STEP_TIMEOUT) -> None:
        def settled() -> bool:
            shown = json.loads(self.osc("etcd-compute-demo", "server", "show", server,
                                        "-f", "json").stdout)
            return shown["status"] == status and shown["OS-EXT-STS:task_state"] in (None, "")

        wait_for(settled, timeout=timeout, interval=1, what=f"{server} {status}")


@pytest.fixture
def walk(tmp_path: Path, test_guest_image: Path, host_config: Any, write_yaml: Any,
         glance_config: dict[str, Any], glance_images: Any, keystone_server: KeystoneServer,
         glance_server: GlanceServer, schedule_config: dict[str, Any], store: Store,
         placement: PlacementClient, cluster_pki: Pki) -> Iterator[Walk]:
    if not OPENSTACK.exists():
        unavailable(f"{OPENSTACK} is missing (make install builds .venv-clients)")
    name = f"etcd-compute-test-guest-{uuidlib.uuid4().hex[:8]}"
    glance_images(test_guest_image, name, visibility="public", architecture="x86_64",
                  hypervisor_type="qemu")
    # One hypervisor host of its own (a network namespace, its libvirtd, guest network and
    # metadata server; tools/local_services/hypervisors.py): no name of the machine's, so
    # the walk-through runs beside the other tests' guests. Its compute reaches Keystone
    # and Glance as it reaches etcd and Placement.
    with hypervisors(["a"]) as hosts:
        computes = ComputeHosts(hosts, host_config, write_yaml, tmp_path,
                                also_reach=(keystone_server.auth_url, glance_server.endpoint))
        try:
            # The hypervisor host's shutdown_timeout_seconds (1 s) stays: the test guest
            # ignores ACPI, so each stop, resize and rebuild waits it out.
            computes.configs["a"] = deep_merge(computes.configs["a"], {
                "compute": {"inventory": {"VCPU": {"total": 8}, "MEMORY_MB": {"total": 8192},
                                          "DISK_GB": {"total": 100}}},
                "glance": glance_config,
            })
            rp = computes.rp("a")
            computes.start("a")
            wait_for(lambda: store.get(store.keys.alive(rp)), 60, what="compute heartbeat")
            seed_flavors(store)
            operator = deep_merge(schedule_config, {"glance": glance_config})
            api_config = deep_merge(operator, {"api": {"workers": 1, "threads": 8,
                                                       "keystone_authtoken": {
                **cloud.service_credentials(keystone_server), "auth_type": "password",
                "cafile": keystone_server.ca_file}}})
            api = ComputeApiServer.create(tmp_path, pki=cluster_pki)
            api.start(api_config)
            try:
                keystone_server.add_service("compute", "nova", api.endpoint)
                schedule_yaml = tmp_path / "schedule.yaml"
                schedule_yaml.write_text(json.dumps(operator))
                log: list[str] = []
                clouds = cloud.write_clouds_yaml(keystone_server, tmp_path / "clouds.yaml")
                shells = OpenStackShells(OPENSTACK.parent / "python",
                                         {**os.environ, "OS_CLIENT_CONFIG_FILE": str(clouds)})
                try:
                    yield Walk(shells, name, rp, computes.configs["a"]["compute"]["name"],
                               schedule_yaml, log, hosts["a"])
                finally:
                    shells.close()
                    print("\n".join(log))
            finally:
                api.stop()
        finally:
            computes.close()


# The whole walk-through (a real guest booted, stopped, started, rebooted, resized, rebuilt)
# with its fixtures' start (Keystone, Glance, the API): 350 s on a loaded machine.
@pytest.mark.timeout(600)
def test_the_issues_walkthrough_with_a_real_guest(walk: Walk, store: Store,
                                                  placement: PlacementClient) -> None:
    demo = "etcd-compute-demo"
    created = walk.osc(demo, "server", "create", "--flavor", "m1.tiny", "--image", walk.image,
                       "--wait", "-f", "json", "walkthrough")
    server = json.loads(created.stdout)["id"]
    try:
        assert walk.field(server, "status") == "ACTIVE"
        listed = json.loads(walk.osc(demo, "server", "list", "-f", "json").stdout)
        assert [s["ID"] for s in listed] == [server]
        shown = json.loads(walk.osc(demo, "server", "show", server, "-f", "json").stdout)
        assert "'m1.tiny'" in repr(shown["flavor"]) and shown["addresses"]
        # The guest's serial console, as its host publishes it.
        wait_for(lambda: "ETCD-COMPUTE-GUEST" in walk.osc(demo, "console", "log", "show",
                                                          server).stdout,
                 timeout=240, interval=2, what="the guest's console")
        connection = walk.hypervisor.connection()
        walk.osc(demo, "server", "stop", server)
        walk.wait_status(server, "SHUTOFF")
        assert not connection.lookupByName(server).isActive()  # the guest, not just a state
        walk.osc(demo, "server", "start", server)
        walk.wait_status(server, "ACTIVE")
        walk.osc(demo, "server", "reboot", "--hard", "--wait", server)
        walk.wait_status(server, "ACTIVE")
        walk.osc(demo, "server", "resize", "--flavor", "m1.small", "--wait", server)
        assert walk.field(server, "status") == "VERIFY_RESIZE"
        walk.osc(demo, "server", "resize", "confirm", server)
        walk.wait_status(server, "ACTIVE")
        assert "m1.small" in walk.field(server, "flavor")
        assert connection.lookupByName(server).maxMemory() == 2048 * 1024  # KiB: m1.small
        walk.osc(demo, "server", "rebuild", "--wait", server)
        walk.wait_status(server, "ACTIVE")
        events = json.loads(walk.osc(demo, "server", "event", "list", server, "-f",
                                     "json").stdout)
        assert [e["Action"] for e in events] == [
            "rebuild", "confirmResize", "resize", "reboot", "start", "stop", "create"]
        # The project's limits are the API's defaults (nobody set its own).
        quota = {row["Resource"]: row["Limit"] for row in json.loads(
            walk.osc(demo, "quota", "show", "-f", "json").stdout)}
        assert {name: quota.get(name) for name in ("instances", "cores", "ram")} == {
            name: API_DEFAULTS["quotas"][name] for name in ("instances", "cores", "ram")}
        limits = json.loads(walk.osc(demo, "limits", "show", "--absolute", "-f",
                                     "json").stdout)
        used = {row["Name"]: row["Value"] for row in limits}
        assert (used["total_instances_used"], used["total_ram_used"]) == (1, 2048)
        walk.osc(demo, "keypair", "create", "walk-key")
        group = json.loads(walk.osc(demo, "server", "group", "create", "--policy",
                                    "anti-affinity", "walk-group", "-f", "json").stdout)
        # What the API kept of it (etcd), and shows again: the policy asked, the server's
        # project, no members.
        kept, _ = store.read(messages.SERVER_GROUP, store.keys.server_group(group["id"]))
        assert kept is not None, group
        assert (kept["name"], kept["policy"], kept["project_id"]) == (
            "walk-group", "anti-affinity", shown["project_id"])
        again = json.loads(walk.osc(demo, "server", "group", "show", group["id"], "-f",
                                    "json").stdout)
        assert (again["name"], again["policy"], again["members"]) == (
            "walk-group", kept["policy"], [])
        # Another project does not find it.
        other = walk.osc("etcd-compute-alt", "server", "show", server, ok=False)
        assert other.returncode != 0 and "No Server found" in other.stderr
        # The admin's views of the hosts.
        # Our host as Placement names it and etcd sees it alive; its libvirt driver: QEMU.
        hypervisors = json.loads(walk.osc("etcd-compute", "hypervisor", "list", "-f",
                                          "json").stdout)
        (seen,) = [h for h in hypervisors if h["ID"] == walk.host]
        provider = placement.get(f"/resource_providers/{walk.host}")
        assert provider["name"] == walk.host_name
        assert store.get(store.keys.alive(walk.host)) is not None
        assert (seen["Hypervisor Hostname"], seen["Hypervisor Type"], seen["State"]) == (
            provider["name"], "QEMU", "up")
        services = json.loads(walk.osc("etcd-compute", "compute", "service", "list", "-f",
                                       "json").stdout)
        (ours,) = [s for s in services if s["Host"] == walk.host_name]
        assert (ours["Binary"], ours["State"], ours["Status"]) == ("nova-compute", "up",
                                                                   "enabled")
        walk.osc("etcd-compute", "compute", "service", "set", "--disable",
                 "--disable-reason", "walkthrough", walk.host_name, "nova-compute")
        services = json.loads(walk.osc("etcd-compute", "compute", "service", "list", "-f",
                                       "json").stdout)
        assert [s["Status"] for s in services if s["Host"] == walk.host_name] == ["disabled"]
        walk.osc("etcd-compute", "compute", "service", "set", "--enable", walk.host_name,
                 "nova-compute")
        # The operator's schedule.py sees the same instance.
        listed = run_cli("schedule.py", "--config", str(walk.schedule_yaml), "list", "--json")
        assert listed.code == 0, listed.stderr
        assert [r["uuid"] for r in json.loads(listed.stdout)
                if r["state"] != "DELETED"] == [server]
        connection.close()
    finally:
        walk.osc(demo, "server", "delete", "--wait", server, ok=False)
        walk.osc(demo, "keypair", "delete", "walk-key", ok=False)
    wait_for(lambda: not placement.get(f"/resource_providers/{walk.host}/allocations")[
        "allocations"], timeout=60, what="the host's allocations freed")

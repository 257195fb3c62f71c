"""The walk-through's cloud, for the tests that drive it as a user would (the walk-through,
the tutorial, the SSH login): Keystone's catalog, Glance with the offline test guest under a
name of the test's own, the compute API, and one libvirt compute on a hypervisor host of its
own (tools/local_services/hypervisors.py); the `openstack` command line in one long-lived
shell per cloud (tests/openstack_shell.py). A test module imports `walk`, the fixture, and
`Walk`.
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

from etcd_compute.config import deep_merge
from etcd_compute.etcd import Store
from etcd_compute.pki import Pki
from etcd_compute.placement import PlacementClient
from tests.openstack_shell import OpenStackShells
from tests.support import REPO, unavailable, wait_for
from tests.virt.hypervisors import hypervisors
from tools.local_services import cloud
from tools.local_services.compute_api import ComputeApiServer, seed_flavors
from tools.local_services.glance import GlanceServer
from tools.local_services.hypervisors import ComputeHosts, Hypervisor
from tools.local_services.keystone import KeystoneServer

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
            api = ComputeApiServer.create(tmp_path, keystone_server.service_port("compute"),
                                          pki=cluster_pki)
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

"""The compute API against real services: the session's etcd (TLS, RBAC) and Placement, a
Keystone (SQLite) with the projects demo and alt, `schedule.py api` (gunicorn, TLS from
the cluster CA) registered in Keystone's catalog, and a fake-driver compute.

One cloud per test module (its own etcd prefix and compute host); each test cleans up
what it made, and `cloud.settle()` checks Placement holds nothing for a project after.
"""

from __future__ import annotations

import uuid as uuidlib
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import yaml

from etcd_compute import config as configuration
from etcd_compute import defaults
from etcd_compute.api.objects.flavors import Flavor, Flavors
from etcd_compute.errors import ServiceUnavailable
from etcd_compute.etcd import Store
from etcd_compute.etcd_auth import ROOT, EtcdAuth
from etcd_compute.pki import COMPUTE, Pki, compute_name
from etcd_compute.placement import PlacementClient
from tests.conftest import OPERATOR_USER, DaemonProcess, wipe_placement
from tests.support import REPO, wait_for
from tools.local_services import EtcdServer, KeystoneServer, PlacementServer
from tools.local_services.compute_api import ComputeApiServer

FLAVORS = [Flavor("1", "m1.tiny", vcpus=1, ram=256, disk=1),
           Flavor("2", "m1.small", vcpus=2, ram=512, disk=2)]
IMAGE = "file:///dev/null"


@pytest.fixture(scope="session")
def keystone(keystone_server: KeystoneServer) -> KeystoneServer:
    """The session's Keystone (projects demo and alt, a member each, the `etcd-compute`
    service user the API validates tokens as: tools/local_services/cloud.py)."""
    return keystone_server


@pytest.fixture(scope="session")
def glance_section(openstack_cloud: tuple[KeystoneServer, Any]) -> dict[str, Any]:
    """The `glance` section of the `etcd-compute` service user (the API resolves images
    with it, the host uploads snapshots with it)."""
    from tools.local_services import cloud as local_cloud

    return local_cloud.glance_config(*openstack_cloud)


@dataclass
class Cloud:
    api: ComputeApiServer
    keystone: KeystoneServer
    config: dict[str, Any]
    store: Store
    placement: PlacementClient
    ca: Path
    host: str
    compute: DaemonProcess
    sessions: dict[str, Any] = field(default_factory=dict)

    def connect(self, user: str = "demo", project: str | None = None) -> Any:
        """An openstacksdk connection as `user` (admin: Keystone's bootstrap admin)."""
        import openstack

        password = self.keystone.password(user)
        return openstack.connect(
            auth_url=self.keystone.auth_url, username=user, password=password,
            project_name=project or user, user_domain_name="Default",
            project_domain_name="Default", cacert=str(self.ca), region_name="RegionOne")

    def session(self, user: str = "demo") -> Any:
        """A keystoneauth1 session as `user`, for raw requests (one per user: its token is
        reused)."""
        if user not in self.sessions:
            self.sessions[user] = self._session(user)
        return self.sessions[user]

    def _session(self, user: str) -> Any:
        from keystoneauth1 import session
        from keystoneauth1.identity import v3

        password = self.keystone.password(user)
        auth = v3.Password(auth_url=self.keystone.auth_url, username=user, password=password,
                           project_name=user, user_domain_name="Default",
                           project_domain_name="Default")
        return session.Session(auth=auth, verify=str(self.ca), timeout=60)

    def project_id(self, name: str) -> str:
        return str(self.keystone._find("projects", name))

    def usage(self, project: str) -> dict[str, int]:
        """What Placement holds for the project's instances."""
        return self.placement.project_usages(self.project_id(project), "INSTANCE")

    def api_keys(self, kind: str) -> list[str]:
        """Keys under /servers/, /quota-reservations/... of this cloud's prefix."""
        entries, _ = self.store.get_prefix(f"{self.store.keys.prefix}/{kind}/", keys_only=True)
        return [e.key for e in entries]


def _host_config(tmp: Path, etcd_server: EtcdServer, placement_server: PlacementServer,
                 pki: Pki, prefix: str) -> dict[str, Any]:
    """A fake-driver compute with room for 32 small instances, its own certificate."""
    rp_uuid = str(uuidlib.uuid4())
    issued = pki.issue(compute_name(rp_uuid), COMPUTE)
    with Store(etcd_server.client_config(prefix, ROOT)) as root:
        EtcdAuth(root).add_host(rp_uuid)
    tls = {"ca_cert": str(pki.ca_cert), "cert": str(issued.cert), "key": str(issued.key)}
    return configuration.deep_merge(defaults.COMPUTE_DEFAULTS, {
        "etcd": {**etcd_server.client_config(prefix), **tls},
        "placement": {**placement_server.client_config(), **tls},
        "logging": {"level": "DEBUG"},
        "compute": {"uuid": rp_uuid, "name": f"api-host-{rp_uuid[:6]}",
                    "state_dir": str(tmp / "state"), "instances_dir": str(tmp / "instances"),
                    "heartbeat_ttl": 3, "fence_margin_seconds": 1, "workers": 4,
                    "job_timeout_seconds": 30, "shutdown_timeout_seconds": 10,
                    "inventory": {
                        "VCPU": {"total": 64, "reserved": 0, "allocation_ratio": 1.0},
                        "MEMORY_MB": {"total": 32768, "reserved": 0, "allocation_ratio": 1.0},
                        "DISK_GB": {"total": 200, "reserved": 0, "allocation_ratio": 1.0}}},
        "driver": {"name": "fake"},
    })


@pytest.fixture(scope="module")
def cloud(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory,
          etcd_server: EtcdServer, placement_server: PlacementServer, cluster_pki: Pki,
          keystone: KeystoneServer, glance_section: dict[str, Any]) -> Iterator[Cloud]:
    """The module's cloud; a module's `cloud_config(keystone, pki)` adds to the API's
    config (its `network` section to the host's too), and its `cloud_host(request, config)`
    returns the host's config changed (it may start the module's fixtures)."""
    tmp = tmp_path_factory.mktemp("api-cloud")
    prefix = f"/api-{uuidlib.uuid4().hex[:12]}"
    placement = PlacementClient(placement_server.client_config(OPERATOR_USER))
    wipe_placement(placement)
    config = configuration.deep_merge(defaults.SCHEDULE_DEFAULTS, {
        "etcd": etcd_server.client_config(prefix, OPERATOR_USER),
        "placement": placement_server.client_config(OPERATOR_USER),
        "logging": {"level": "INFO"},
        "glance": glance_section,
        "scheduler": {"default_image": IMAGE, "etcd_max_txn_ops": 4096},
        "api": {"workers": 2, "threads": 8, "image_url_prefixes": ["file:///dev/"],
                "keystone_authtoken": {
            **keystone.client_section("etcd-compute", None, "service"),
            "cafile": keystone.ca_file,
            "auth_type": "password"}},
    })
    more = getattr(request.module, "cloud_config", None)
    more = more(keystone, cluster_pki) if more else {}
    config = configuration.deep_merge(config, more)
    configuration.validate(config, "schedule_config", "test api config")
    store = Store(config["etcd"])
    for flavor in FLAVORS:
        Flavors(store).create(Flavor(**{**flavor.__dict__}))
    host = {**_host_config(tmp, etcd_server, placement_server, cluster_pki, prefix),
            "glance": glance_section}
    if "network" in more:
        host["network"] = configuration.deep_merge(host["network"], more["network"])
    changed = getattr(request.module, "cloud_host", None)  # a module's own host settings
    if changed:
        host = changed(request, host)
    host_yaml = tmp / "compute.yaml"
    host_yaml.write_text(yaml.safe_dump(host))
    compute = DaemonProcess([str(REPO / "compute.py"), "--config", str(host_yaml)],
                            tmp / "compute.log").start()
    api = ComputeApiServer.create(tmp, keystone.service_port("compute"), pki=cluster_pki)
    try:
        wait_for(lambda: store.get(store.keys.alive(host["compute"]["uuid"])) is not None,
                 timeout=30, what="the compute's heartbeat")
        api.start(config)
    except (ServiceUnavailable, AssertionError):
        compute.stop()
        api.stop()
        raise
    keystone.add_service("compute", "nova", api.endpoint)
    yield Cloud(api, keystone, config, store, placement, cluster_pki.ca_cert,
                host["compute"]["uuid"], compute)
    api.stop()
    compute.stop()
    store.client.delete_prefix(prefix + "/")
    store.close()
    wipe_placement(placement)

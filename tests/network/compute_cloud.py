"""The compute API over real guests on Neutron ports, for the tests that drive it as a user
would (`openstack`, openstacksdk): the package's OVN hypervisor hosts (guests.py) each with
its compute.py (network.backend neutron), the compute API (`schedule.py api`, the neutron
backend, found in Keystone's catalog as `compute`) on the same etcd and Placement, and
demo's servers booted from the offline test guest by its file:// URL (the API's
`image_url_prefixes`) or from the session's Glance (hosts and API have its `glance`
section: the dashboard's launch wizard picks an image there), and the console proxy
(`schedule.py console-proxy`, noVNC) beside the API, each host's guests' screens relayed
to it from a free loopback port (compute.yaml's `console`, as `make up`'s neutron host has
it): the remote-consoles API's URLs open in a browser. A test module imports
`compute_cloud`, the fixture, and `ComputeCloud`; the `openstack` fixture (conftest.py) is
the command line.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from etcd_compute.config import deep_merge
from etcd_compute.pki import Pki
from tests.conftest import DaemonProcess
from tests.support import wait_for
from tools.local_services import KeystoneServer, cloud
from tools.local_services.compute_api import ComputeApiServer
from tools.local_services.console_proxy import (
    ConsoleProxyServer,
    host_section,
    operator_section,
)
from tools.local_services.ovn_hypervisors import OvnHypervisors

FLAVOR = "42"  # m1.nano: 1 vCPU, 128 MiB, 1 GB (guests.RESOURCES)
STEP_TIMEOUT = 300


@dataclass
class ComputeCloud:
    api: ComputeApiServer
    keystone: KeystoneServer
    image: str
    computes: dict[str, DaemonProcess]
    rps: dict[str, str]
    ca: str
    console_proxy: ConsoleProxyServer
    made: list[tuple[str, str]] = field(default_factory=list)
    sessions: dict[str, Any] = field(default_factory=dict)

    def session(self, user: str = "demo") -> Any:
        """A keystoneauth1 session as `user` (its project of its name)."""
        if user not in self.sessions:
            from keystoneauth1 import session
            from keystoneauth1.identity import v3

            auth = v3.Password(auth_url=self.keystone.auth_url, username=user,
                               password=self.keystone.password(user), project_name=user,
                               user_domain_name="Default", project_domain_name="Default")
            self.sessions[user] = session.Session(auth=auth, verify=self.ca, timeout=150)
        return self.sessions[user]

    def anti_affinity(self, user: str, name: str) -> str:
        """A server group of `user`'s whose members go to different hosts."""
        answer = self.session(user).post(
            f"{self.api.endpoint}/os-server-groups",
            json={"server_group": {"name": name, "policies": ["anti-affinity"]}})
        return str(answer.json()["server_group"]["id"])

    def boot(self, user: str, name: str, networks: list[dict[str, str]] | str,
             group: str | None = None, **more: Any) -> str:
        """A server of `user`'s (demo, alt) on `networks`, in server group `group`."""
        body: dict[str, Any] = {"name": name, "flavorRef": FLAVOR, "imageRef": self.image,
                                "networks": networks, **more}
        hints = {"os:scheduler_hints": {"group": group}} if group else {}
        answer = self.session(user).post(f"{self.api.endpoint}/servers",
                                         json={"server": body, **hints}, raise_exc=False)
        assert answer.status_code == 202, answer.text
        uuid = str(answer.json()["server"]["id"])
        self.made.append((user, uuid))
        return uuid

    def server(self, uuid: str, user: str = "admin") -> dict[str, Any]:
        return dict(self.session(user).get(f"{self.api.endpoint}/servers/{uuid}")
                    .json()["server"])

    def wait_status(self, uuid: str, status: str = "ACTIVE",
                    timeout: float = STEP_TIMEOUT) -> dict[str, Any]:
        def settled() -> dict[str, Any] | None:
            shown = self.server(uuid)
            if shown["status"] == "ERROR" and status != "ERROR":
                pytest.fail(f"{uuid} ERROR: {shown.get('fault')}; compute logs: "
                            + " | ".join(d.log()[-1500:] for d in self.computes.values()))
            ok = shown["status"] == status and not shown.get("OS-EXT-STS:task_state")
            return shown if ok else None

        return wait_for(settled, timeout=timeout, interval=1, what=f"{uuid} {status}")

    def wait_gone(self, timeout: float = 180) -> None:
        """Every server made here deleted (asked) and gone (404), their ports with them."""
        admin = self.session("admin")
        for _user, uuid in self.made:
            admin.delete(f"{self.api.endpoint}/servers/{uuid}", raise_exc=False)
        deadline = time.monotonic() + timeout
        while self.made and time.monotonic() < deadline:
            self.made = [(u, s) for u, s in self.made
                         if admin.get(f"{self.api.endpoint}/servers/{s}",
                                      raise_exc=False).status_code != 404]
            time.sleep(1)

    def log(self) -> str:
        return "\n".join(f"--- {name}\n{daemon.log()[-3000:]}"
                         for name, daemon in self.computes.items())


@pytest.fixture
def compute_cloud(hosts: OvnHypervisors, guest_image: str, keystone_server: KeystoneServer,
                  schedule_config: dict[str, Any], host_config: Callable[..., Any],
                  write_yaml: Callable[..., Path], store: Any, cluster_pki: Pki,
                  placement: Any, glance_config: dict[str, Any],
                  tmp_path: Path) -> Iterator[ComputeCloud]:
    computes: dict[str, DaemonProcess] = {}
    rps: dict[str, str] = {}
    api = ComputeApiServer.create(tmp_path, keystone_server.service_port("compute"),
                                  pki=cluster_pki)
    proxy = ConsoleProxyServer.create(tmp_path)
    try:
        for name, host in hosts.hosts.items():
            config = host_config(name, compute={
                key: host.config["compute"][key] for key in ("state_dir", "instances_dir")}
                | {"job_timeout_seconds": 240, "shutdown_timeout_seconds": 1,
                   "inventory": {"VCPU": {"total": 8}, "MEMORY_MB": {"total": 4096},
                                 "DISK_GB": {"total": 50}}},
                driver=host.config["driver"], network=host.config["network"],
                glance=glance_config, console=host_section(cluster_pki, name, "127.0.0.1"))
            path = str(write_yaml(f"{name}.yaml", config))
            computes[name] = DaemonProcess(["compute.py", "--config", path],
                                           tmp_path / f"{name}-compute.log").start()
            rps[name] = config["compute"]["uuid"]
        for name, rp in rps.items():
            wait_for(lambda rp=rp, name=name: store.get(store.keys.alive(rp)) or
                     not computes[name].alive() and
                     pytest.fail(f"compute.py {name}: {computes[name].log()[-2000:]}"),
                     60, what=f"{name}'s heartbeat")
        from tools.local_services.compute_api import seed_flavors
        seed_flavors(store)
        image_dir = guest_image.removeprefix("file://").rsplit("/", 1)[0]
        api_config = deep_merge(schedule_config, {
            "network": hosts["hv1"].config["network"], "glance": glance_config,
            "console": operator_section(cluster_pki, proxy.port),
            "api": {"workers": 1, "threads": 8,
                    "image_url_prefixes": [f"file://{image_dir}/"],
                    "keystone_authtoken": {**cloud.service_credentials(keystone_server),
                                           "auth_type": "password",
                                           "cafile": keystone_server.ca_file}}})
        proxy.start(deep_merge(api_config, {"logging": {"level": "INFO"}}))
        api.start(api_config)
        keystone_server.add_service("compute", "nova", api.endpoint)
        made = ComputeCloud(api, keystone_server, guest_image, computes, rps,
                            str(cluster_pki.ca_cert), proxy)
        try:
            yield made
        finally:
            made.wait_gone()
    finally:
        api.stop()
        proxy.stop()
        for daemon in computes.values():
            daemon.stop()
        # The hosts' names (hv1, hv2) are the chassis' and are used by other modules on
        # the session's Placement: their providers go with them.
        for rp in rps.values():
            with contextlib.suppress(Exception):
                placement.delete_provider(rp)

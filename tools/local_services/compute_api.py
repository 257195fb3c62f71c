"""The compute API (`schedule.py api`) as a local service: gunicorn with TLS from the
cluster PKI, its config written beside it, on loopback."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import yaml

from etcd_compute.pki import PLACEMENT, Pki
from tools.local_services.process import REPO, Service, free_port

# The API serves TLS with a server certificate of the cluster CA (the kind Placement's
# has: server authentication only); clients verify it with the CA and present none.
SERVER_KIND = PLACEMENT


class ComputeApiServer(Service):
    """Nova's v2.1 API on 127.0.0.1:<port>, as `schedule.py api --config <run>/api.yaml`."""

    pki: Pki | None = None

    @classmethod
    def create(cls, run_dir: Path, port: int | None = None, pki: Pki | None = None,
               name: str = "compute-api") -> ComputeApiServer:
        server = cls(name, run_dir, port or free_port())
        server.pki = pki
        return server

    @property
    def endpoint(self) -> str:
        """The versioned endpoint, as the catalog names it."""
        return f"{self.root}/v2.1"

    @property
    def root(self) -> str:
        return f"{'https' if self.pki else 'http'}://127.0.0.1:{self.port}"

    @property
    def config_path(self) -> Path:
        return self.run_dir / f"{self.name}.yaml"

    def write_config(self, config: dict[str, Any]) -> Path:
        """`config` (schedule.yaml's sections) with this server's `api` listen and TLS."""
        api = dict(config.get("api") or {})
        api["listen"] = f"127.0.0.1:{self.port}"
        if self.pki:
            issued = self.pki.issue(self.name, SERVER_KIND, ips=["127.0.0.1"])
            api.update(cert=str(issued.cert), key=str(issued.key))
        self.run_dir.mkdir(parents=True, exist_ok=True)
        self.config_path.write_text(yaml.safe_dump({**config, "api": api}))
        self.config_path.chmod(0o600)  # the operator's credentials, the service password
        return self.config_path

    def start(self, config: dict[str, Any], timeout: float = 60) -> ComputeApiServer:
        path = self.write_config(config)
        self._spawn([sys.executable, str(REPO / "schedule.py"), "--config", str(path), "api"])
        verify: str | bool = str(self.pki.ca_cert) if self.pki else True
        self._wait_healthy(self.root + "/", timeout, verify)
        return self


# Nova's usual flavors (devstack's), as `make up` seeds them; existing ones are kept.
FLAVORS = (("42", "m1.nano", 1, 128, 1), ("84", "m1.micro", 1, 192, 1),
           ("1", "m1.tiny", 1, 512, 1), ("2", "m1.small", 1, 2048, 20),
           ("3", "m1.medium", 2, 4096, 40), ("4", "m1.large", 4, 8192, 80))


def seed_flavors(store: Any) -> list[str]:
    """Create the flavors above that are missing (by id or name); their names."""
    from etcd_compute.api.objects.flavors import Flavor, FlavorExists, Flavors

    made = []
    flavors = Flavors(store)
    for flavor_id, name, vcpus, ram, disk in FLAVORS:
        try:
            flavors.create(Flavor(flavor_id, name, vcpus, ram, disk))
        except FlavorExists:
            continue
        made.append(name)
    return made

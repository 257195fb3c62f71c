"""What the network tests share: a Neutron stack to start (`tests.support.running`: skipped,
or failed under CI=true, when a piece is missing) and the `openstack` command line as each
cloud's user."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

from etcd_compute.pki import Pki
from tests.openstack_shell import OpenStackShells
from tests.support import unavailable
from tools.local_services import CLIENTS_VENV, KeystoneServer
from tools.local_services.networking import NetworkStack

OPENSTACK = CLIENTS_VENV / "bin" / "openstack"
DEMO, ALT = "etcd-compute-demo", "etcd-compute-alt"


def network_stack(run_dir: Path, keystone: KeystoneServer, pki: Pki | None) -> NetworkStack:
    """A stack to start with `running`, once the `openstack` command line the tests drive
    it with is there."""
    if not OPENSTACK.exists():
        unavailable(f"{OPENSTACK} is missing (make install builds .venv-clients)")
    return NetworkStack.create(run_dir, keystone, pki=pki)


class Cli:
    """`openstack --os-cloud CLOUD ARGS...` with clouds.yaml of the session's Keystone."""

    def __init__(self, shells: OpenStackShells):
        self.shells = shells

    def run(self, cloud_name: str, *args: str) -> subprocess.CompletedProcess[str]:
        return self.shells.run(cloud_name, *args, timeout=120)

    def ok(self, cloud_name: str, *args: str) -> str:
        """The command's output; it must succeed."""
        done = self.run(cloud_name, *args)
        assert done.returncode == 0, f"openstack {' '.join(args)}: {done.stderr[-2000:]}"
        return done.stdout

    def __call__(self, cloud_name: str, *args: str) -> Any:
        """The command's JSON answer; it must succeed."""
        return json.loads(self.ok(cloud_name, *args, "-f", "json"))

"""A user logs in to their server over SSH with the key pair they booted it with.

As `etcd-compute-demo`, through Keystone's catalog, the real API and a libvirt compute on
a hypervisor host of its own (the walk-through's fixture, tests/virt/
test_api_walkthrough_vm.py): `keypair create --public-key`, `server create --key-name
--wait`; then, from the guest's hypervisor host (its network namespace, where the guest
network's gateway is), `ssh root@<ip>` with that key runs a command in the guest that
asks the metadata service for its instance id, which is the server's id. The host key
it accepted is the one the guest printed on its console; another key is refused, and the
guest offers no password login. One guest.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import time
from pathlib import Path

import pytest

from tests.support import unavailable, wait_for
from tests.virt.cloud_walk import Walk, walk  # noqa: F401 (walk: the fixture)

pytestmark = pytest.mark.vm

# The test guest's login user (tools/build-test-guest.sh).
USER = "root"


def keypair(path: Path) -> Path:
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", path.name, "-f",
                    str(path)], check=True)
    return path


def ssh(on: Walk, key: Path, known_hosts: Path, address: str,
        command: str) -> subprocess.CompletedProcess[str]:
    """`ssh` from the guest's hypervisor host, as its user would from a machine on the
    guest network: no agent, no config file, no password prompt."""
    argv = ["ip", "netns", "exec", on.hypervisor.space.netns,
            "ssh", "-F", "none", "-i", str(key), "-o", "IdentitiesOnly=yes",
            "-o", "IdentityAgent=none", "-o", "BatchMode=yes", "-o", "ConnectTimeout=20",
            "-o", "StrictHostKeyChecking=accept-new",
            "-o", f"UserKnownHostsFile={known_hosts}", f"{USER}@{address}", command]
    return subprocess.run(argv, capture_output=True, text=True, timeout=90, check=False)


# A server created and booted (60-120 s under TCG on a loaded machine) after the
# walk-through's fixtures start (Keystone, Glance, the API, a hypervisor host).
@pytest.mark.timeout(600)
def test_a_user_logs_in_to_their_server_with_their_key(walk: Walk, tmp_path: Path) -> None:  # noqa: F811
    if shutil.which("ssh") is None or shutil.which("ssh-keygen") is None:
        unavailable("ssh and ssh-keygen are missing (tools/install.sh installs openssh-client)")
    demo = "etcd-compute-demo"
    key, other = keypair(tmp_path / "id_user"), keypair(tmp_path / "id_other")
    known_hosts = tmp_path / "known_hosts"
    walk.osc(demo, "keypair", "create", "--public-key", f"{key}.pub", "login-key")
    started = time.monotonic()
    created = walk.osc(demo, "server", "create", "--flavor", "m1.tiny", "--image", walk.image,
                       "--key-name", "login-key", "--wait", "-f", "json", "login")
    server = json.loads(created.stdout)["id"]
    try:
        shown = json.loads(walk.osc(demo, "server", "show", server, "-f", "json").stdout)
        assert shown["key_name"] == "login-key"
        (address,) = re.findall(r"\d+\.\d+\.\d+\.\d+", json.dumps(shown["addresses"]))
        # The guest's last boot marker: by then whatever it serves is up.
        console = wait_for(lambda: (lambda text: text if "ETCD-COMPUTE-GUEST ready" in text
                                    else None)(walk.hypervisor.console(server)),
                           timeout=180, interval=0.5, what="the guest's ready marker")
        booted = time.monotonic() - started

        logged_in = ssh(walk, key, known_hosts, address, "metadata meta-data/instance-id")
        assert logged_in.returncode == 0, (logged_in.stderr, console[-3000:])
        assert logged_in.stdout.strip() == server
        print(f"server create to ready {booted:.1f} s; "
              f"first login {time.monotonic() - started - booted:.1f} s")

        # The host key ssh accepted is the one the guest printed on its console, which
        # the user reads through the API (its host republishes it every 5 s while it boots).
        (printed,) = re.findall(r"^ETCD-COMPUTE-GUEST sshd host-key=(\S+ \S+)", console, re.M)
        (accepted,) = [line.split(None, 1)[1] for line in known_hosts.read_text().splitlines()]
        assert accepted == printed
        wait_for(lambda: f"sshd host-key={printed}" in walk.osc(
            demo, "console", "log", "show", server).stdout, timeout=30, interval=2,
            what="the host key in the console log the API shows")

        # Another key is refused, and no password is asked for: the server offers
        # public-key authentication only.
        refused = ssh(walk, other, known_hosts, address, "true")
        assert refused.returncode == 255
        assert "Permission denied (publickey)." in refused.stderr, refused.stderr
    finally:
        walk.osc(demo, "server", "delete", "--wait", server, ok=False)
        walk.osc(demo, "keypair", "delete", "login-key", ok=False)

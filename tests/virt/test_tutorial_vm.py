"""The tutorial (docs/tutorial.md) runs as written: its `sh` blocks, in order, in bash with
`set -e`, in a directory of its own whose `run/` is the run directory of a real `make up`
on free ports (`python -m tools.local_services up`, what `make up` runs: etcd, Placement,
Keystone, Glance, the compute API, Neutron on OVN with MariaDB, the hypervisor host
`local` in a network namespace, the outside namespace and `public`), then `make down`'s
own command.

A few lines stand for what the test does instead (`make demo`, `make test`, the clone):
each is named below, `make up` and `make down` are run as the Makefile runs them with the
test's ports and run directory (and no dashboard, which the tutorial does not use), and a
line of the tutorial that is neither run nor named
fails the test, so a new step cannot go untested. One thing differs from a reader's
machine, by the test's environment: `ssh` (run by `run/outside`, in the outside namespace)
is given a known-hosts file of the test's own, and asked again while the guest's SSH
server is not up yet (for up to 90 s), as the tutorial tells the reader to. And
`openstack` is a small client handing its arguments to the test's long-lived `openstack`
shell of that cloud (tests/openstack_shell.py: the same `openstackclient.shell.main`,
clouds.yaml and output, without the 2-3 s of starting the client on a loaded machine, 22
times).

Then what is left is checked: after the tutorial's deletes, Neutron and OVN's databases
hold what they held right after `make up` (the demo project's default security group
made first: Neutron makes it at a project's first request); after `make down`, none of the
processes, namespaces, bridges, veths, directories and registrations `make up` made.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import socketserver
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psutil
import pytest

from tests.openstack_shell import OpenStackShells
from tests.support import REPO, unavailable
from tools.local_services import free_port
from tools.local_services.netns import REGISTRY, ip, netns_usable

pytestmark = pytest.mark.vm

TUTORIAL = REPO / "docs" / "tutorial.md"
OPENSTACK = REPO / ".venv-clients" / "bin" / "openstack"
# The tutorial's lines this test does not run, and what stands in for each.
STANDS_IN = {
    "git clone REPOSITORY-URL etcd-compute && cd etcd-compute   # this repository":
        "the test runs in a clone",
    "make demo": "run by hand before each stop (the closing notes say so)",
    "make test": "the run this test is part of",
}
# Run as the Makefile runs them, with the test's ports and run directory.
MAKE = {"make up": "up", "make down": "down"}
UUID = re.compile(r"\b[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}\b")
# What the tutorial's deletes must leave as they were: Neutron's collections, OVN's tables.
NEUTRON = ("networks", "subnets", "ports", "routers", "floatingips", "security-groups",
           "security-group-rules")
NORTHBOUND = ("Logical_Switch", "Logical_Switch_Port", "Logical_Router",
              "Logical_Router_Port", "NAT", "ACL", "Port_Group", "Address_Set",
              "DHCP_Options", "Gateway_Chassis", "HA_Chassis_Group")
SOUTHBOUND = ("Port_Binding", "Datapath_Binding", "MAC_Binding")


def blocks(text: str) -> list[tuple[str, list[str]]]:
    """The fenced blocks of a Markdown page: (info string, its lines), backslash-continued
    lines joined."""
    found: list[tuple[str, list[str]]] = []
    lines: list[str] | None = None
    for line in text.splitlines():
        fence = re.match(r"^```(\S*)", line)
        if fence and lines is None:
            found.append((fence.group(1), []))
            lines = found[-1][1]
        elif fence:
            lines = None
        elif lines is not None:
            if lines and lines[-1].endswith("\\"):
                lines[-1] = lines[-1][:-1].rstrip() + " " + line.strip()
            else:
                lines.append(line)
    return found


def commands(text: str) -> list[list[str]]:
    """The tutorial's command blocks (`sh`, and the `text` block of the two commands), each
    a list of its commands."""
    return [[line for line in lines if line.strip()] for info, lines in blocks(text)
            if info in ("sh", "text")]


def test_the_tutorial_blocks_are_read_as_a_reader_types_them() -> None:
    page = ("x\n```sh\na \\\n    b\n```\n```console\n# c\n```\n```text\nmake demo\n```\n")
    assert commands(page) == [["a b"], ["make demo"]]


# The `openstack` the tutorial's bash finds first: its arguments, OS_CLOUD and directory to
# the test's socket; the command's stdout, stderr and exit status back.
CLIENT = """#!/usr/bin/python3
import json, os, socket, sys
with socket.socket(socket.AF_UNIX) as sock:
    sock.connect(%r)
    sock.sendall(json.dumps({"argv": sys.argv[1:], "cloud": os.environ.get("OS_CLOUD", ""),
                             "cwd": os.getcwd()}).encode() + b"\\n")
    answer = json.loads(sock.makefile().readline())
sys.stdout.write(answer["stdout"])
sys.stderr.write(answer["stderr"])
sys.exit(answer["code"])
"""


@contextlib.contextmanager
def openstack_server(path: Path, clouds: Path) -> Iterator[None]:
    """The tutorial's `openstack` commands run by long-lived shells, one per cloud; the
    `--os-cloud` given, else OS_CLOUD; clouds.yaml is make up's."""
    shells = OpenStackShells(OPENSTACK.parent / "python",
                             {**os.environ, "OS_CLIENT_CONFIG_FILE": str(clouds)})

    class Handler(socketserver.StreamRequestHandler):
        def handle(self) -> None:
            asked = json.loads(self.rfile.readline())
            argv, cloud = list(asked["argv"]), asked["cloud"]
            if "--os-cloud" in argv:
                at = argv.index("--os-cloud")
                cloud = argv[at + 1]
                del argv[at:at + 2]
            argv = [str(Path(asked["cwd"]) / arg) if arg.startswith("run/") else arg
                    for arg in argv]  # the shells' directory is not the tutorial's
            done = shells.run(cloud, *argv, timeout=600)
            self.wfile.write(json.dumps({"code": done.returncode, "stdout": done.stdout,
                                         "stderr": done.stderr}).encode() + b"\n")

    server = socketserver.ThreadingUnixStreamServer(str(path), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield
    finally:
        server.shutdown()
        server.server_close()
        shells.close()


def _workdir(tmp_path: Path) -> tuple[Path, dict[str, str]]:
    """A directory the tutorial's relative paths work in (run/, .venv-clients,
    ./compute.py, ./schedule.py), and its environment: `ssh` with the test's known-hosts
    file, asked again while the guest's SSH server is not up."""
    work = tmp_path / "tutorial"
    work.mkdir()
    for name in ("compute.py", "schedule.py"):
        (work / name).symlink_to(REPO / name)
    tools = work / "tools-of-the-test"
    tools.mkdir()
    # The tutorial puts .venv-clients/bin first on PATH: its `openstack` is the client.
    (work / ".venv-clients" / "bin").mkdir(parents=True)
    ssh = tools / "ssh"
    # The first value of an option wins: the test's known-hosts file, never root's.
    ssh.write_text(
        "#!/bin/sh\n"
        "deadline=$(( $(date +%s) + 90 ))\n"
        "while :; do\n"
        "    /usr/bin/ssh -F none -o BatchMode=yes -o ConnectTimeout=10 "
        f"-o UserKnownHostsFile={tmp_path / 'known_hosts'} \"$@\" && exit 0\n"
        "    status=$?\n"
        "    [ $status -eq 255 ] && [ $(date +%s) -lt $deadline ] || exit $status\n"
        "    sleep 2\n"
        "done\n")
    ssh.chmod(0o755)
    client = work / ".venv-clients" / "bin" / "openstack"
    client.write_text(CLIENT % str(tmp_path / "openstack.sock"))
    client.chmod(0o755)
    env = {key: value for key, value in os.environ.items() if not key.startswith("OS_")}
    env["PATH"] = f"{tools}:{env['PATH']}"
    return work, env


def _make(action: str, run_dir: Path, ports: dict[str, int]) -> str:
    """What `make up` / `make down` run, with the test's run directory and ports."""
    options = [f"--{name}-port {port}" for name, port in ports.items()] if action == "up" else []
    return " ".join([sys.executable, "-m", "tools.local_services", action, "--run-dir",
                     str(run_dir), *options])


def _script(lines: list[str], run_dir: Path, ports: dict[str, int]) -> str:
    script = ["set -euo pipefail"]
    for line in lines:
        if line.startswith("@@"):
            script.append(f"echo '{line}'")
        elif line in STANDS_IN:
            script.append(":")
        elif line in MAKE:
            script.append(f"(cd {REPO} && {_make(MAKE[line], run_dir, ports)})")
        else:
            script.append(line)
    return "\n".join(script)


def _neutron(site: dict[str, Any], keystone: dict[str, Any]) -> Any:
    """Neutron as the user of `keystone` (a keystone section)."""
    from etcd_compute.neutron import NeutronClient

    settings = site["hosts"]["local"]["config"]["network"]["neutron"]
    return NeutronClient({**settings, "keystone": keystone})


def _state(run_dir: Path, site: dict[str, Any], keystone: Any) -> dict[str, set[str]]:
    """Every item's id in Neutron (as the admin) and every row's uuid in OVN's tables."""
    neutron = _neutron(site, keystone)
    state: dict[str, set[str]] = {}
    for collection in NEUTRON:
        key = collection.replace("-", "_")
        state[f"neutron {collection}"] = {
            item["id"] for item in neutron.request("GET", f"/{collection}").json()[key]}
    ovn = run_dir / "network" / "ovn"
    for tool, database, tables in (("ovn-nbctl", "ovnnb_db", NORTHBOUND),
                                   ("ovn-sbctl", "ovnsb_db", SOUTHBOUND)):
        for table in tables:
            done = subprocess.run([tool, f"--db=unix:{ovn / (database + '.sock')}", "--bare",
                                   "--columns=_uuid", "list", table], capture_output=True,
                                  text=True, check=True, timeout=30)
            state[f"{database} {table}"] = set(done.stdout.split())
    return state


def _keystone_sections(run_dir: Path) -> tuple[dict[str, Any], dict[str, Any]]:
    """The admin's and demo's `keystone` sections, from the stack's Keystone."""
    from tools.local_services.stack import LocalStack

    keystone = LocalStack.load(run_dir)._keystone()  # noqa: SLF001
    return (keystone.client_section("admin", None, "admin"),
            keystone.client_section("demo", None, "demo"))


def _made(run_dir: Path, site: dict[str, Any]) -> dict[str, Any]:
    """What make up made on the machine, to find none of it after make down."""
    spaces = [host["netns"] for host in site["hosts"].values()] + [site["outside"]["netns"]]
    ids = {space.split("-", 1)[0].removeprefix("ec") for space in spaces}
    stack = json.loads((run_dir / "services.json").read_text())
    pids = [*site["pids"], stack["site"]["pid"],
            *(stack[name]["pid"] for name in ("etcd", "placement", "keystone", "glance",
                                              "compute_api"))]
    roots = {str(Path(host["config"]["compute"]["instances_dir"]).parents[1])
             for host in site["hosts"].values()}
    return {"spaces": spaces, "ids": ids, "pids": pids, "roots": roots}


def _left(run_dir: Path, made: dict[str, Any]) -> list[str]:
    left = []
    spaces = ip("netns", "list").stdout
    left += [f"namespace {name}" for name in made["spaces"] if name in spaces]
    left += [f"namespace {line.split()[0]}" for line in spaces.splitlines()
             if line.startswith("ovnmeta-")]
    links = ip("-o", "link", "show").stdout
    left += [f"link {word.rstrip(':').split('@')[0]}" for line in links.splitlines()
             for word in line.split()[1:2] for net_id in made["ids"] if net_id in word]
    left += [f"registration {REGISTRY / net_id}" for net_id in made["ids"]
             if (REGISTRY / net_id).exists()]
    left += [f"process {pid}" for pid in made["pids"] if psutil.pid_exists(pid)
             and psutil.Process(pid).status() != psutil.STATUS_ZOMBIE]
    for process in psutil.process_iter(["pid", "cmdline"]):
        line = " ".join(process.info["cmdline"] or [])
        if str(run_dir) in line or any(root in line for root in made["roots"]):
            left.append(f"process {process.info['pid']} {line[:120]}")
    left += [f"directory {path}" for path in [run_dir, *map(Path, made["roots"])]
             if path.exists()]
    return left


# Starts the whole of make up (Neutron, OVN, the host), boots a guest under TCG, SSHes in
# from outside, then make down.
@pytest.mark.timeout(1500)
def test_the_tutorial_runs_as_written_and_leaves_nothing(tmp_path: Path) -> None:
    why = netns_usable()
    if why:
        unavailable(why)
    if not OPENSTACK.exists():
        unavailable(f"{OPENSTACK} is missing (make install builds .venv-clients)")
    steps = commands(TUTORIAL.read_text())
    lines = [line for block in steps for line in block]
    named = [line for line in lines if line in STANDS_IN or line in MAKE]
    assert sorted(named) == sorted([*STANDS_IN, *MAKE]), "a line named here left the tutorial"
    work, env = _workdir(tmp_path)
    run_dir = work / "run"
    ports = {name: free_port() for name in ("etcd", "placement", "keystone", "glance", "api",
                                          "console")}
    ports["dashboard"] = 0  # no Horizon: the tutorial does not use it (make up's start saved)
    # Three runs of bash: up to make up, the user's part, make down (Neutron and OVN are
    # looked at between them).
    up_at = lines.index("make up")
    down_at = lines.index("make down")
    numbered: list[str] = []
    for number, block in enumerate(steps):
        numbered += [f"@@ block {number}", *block]
    up_end = numbered.index("make up") + 1
    down_start = numbered.index("make down")
    parts = [numbered[:up_end], numbered[up_end:down_start], numbered[down_start:]]
    assert up_at < down_at
    said, took = "", []
    site: dict[str, Any] = {}
    made: dict[str, Any] = {}
    exits = contextlib.ExitStack()
    try:
        exits.enter_context(openstack_server(tmp_path / "openstack.sock",
                                             run_dir / "clouds.yaml"))
        for index, part in enumerate(parts):
            began = time.monotonic()
            done = subprocess.run(["bash", "-c", _script(part, run_dir, ports)], cwd=work,
                                  env=env, capture_output=True, text=True, timeout=1200,
                                  check=False)
            took.append(time.monotonic() - began)
            said += done.stdout
            assert done.returncode == 0, (done.stdout + done.stderr)[-4000:]
            if index == 0:
                site = json.loads((run_dir / "network" / "site.json").read_text())
                made = _made(run_dir, site)
                admin, demo = _keystone_sections(run_dir)
                _neutron(site, demo).request("GET", "/security-groups")  # demo's default
                before = _state(run_dir, site, admin)
            elif index == 1:
                after = _state(run_dir, site, admin)
                assert {key: after[key] - before[key] for key in after
                        if after[key] - before[key]} == {}, "left in Neutron or OVN"
    finally:
        exits.close()
        if (run_dir / "services.json").exists():
            subprocess.run(_make("down", run_dir, ports).split(), cwd=REPO,
                           capture_output=True, timeout=300, check=False)
        print(f"\ntutorial: make up {took[0] if took else 0:.0f} s, the walk-through "
              f"{took[1] if len(took) > 1 else 0:.0f} s, make down "
              f"{took[2] if len(took) > 2 else 0:.0f} s")
    assert _left(run_dir, made) == []

    outputs = {int(part.split("\n", 1)[0]): part.split("\n", 1)[1] if "\n" in part else ""
               for part in said.split("@@ block ")[1:]}
    created, logged_in, looked = (outputs[index] for index in _indexes(steps))
    (server,) = {match for match in UUID.findall(created)
                 if re.search(rf"\|\s*id\s*\|\s*{match}", created)}
    shown = logged_in.strip().splitlines()
    assert shown[0] == "root"  # the guest's user, over SSH from outside with the key
    assert shown[-1] == server  # the metadata service's answer to the guest, over SSH
    assert server in looked  # schedule.py list: the operator's view of the same instance


def _indexes(steps: list[list[str]]) -> tuple[int, int, int]:
    """Which blocks create the server, log in, and look around."""
    def first(word: str) -> int:
        return next(index for index, block in enumerate(steps)
                    if any(word in line for line in block))

    return first("server create"), first("ssh -i"), first("schedule.py")

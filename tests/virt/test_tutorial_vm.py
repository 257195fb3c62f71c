"""The tutorial (docs/tutorial.md) runs as written: its `sh` blocks, in order, in one bash
with `set -e`, against a real cloud (Keystone, Glance, the compute API, a libvirt compute
booting the offline test guest, on free ports: the walk-through's fixture).

A few lines stand for what the fixture does instead (`make up`, the compute started in the
background, `make down`...): each is named below with what stands in for it, and a line of
the tutorial that is neither run nor named fails the test, so a new step cannot go
untested. Two things differ from a reader's machine, both by the test's environment, not
by the commands: the image's name (the tests share one Glance, so each uploads its own
copy under a name of its own), and `ssh`, which runs in the hypervisor host's network
namespace (where its guest network is) with a known-hosts file of the test's own.
"""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path

import pytest

from etcd_compute.placement import PlacementClient
from tests.support import REPO
from tests.virt.cloud_walk import Walk, walk  # noqa: F401 (walk: the fixture)

pytestmark = pytest.mark.vm

TUTORIAL = REPO / "docs" / "tutorial.md"
IMAGE = "etcd-compute-test-guest"
# The tutorial's lines this test does not run, and what stands in for each.
STANDS_IN = {
    "git clone REPOSITORY-URL etcd-compute && cd etcd-compute   # this repository":
        "the test runs in a clone",
    "make demo": "run by hand before each stop (the closing notes say so)",
    "make test": "the run this test is part of",
    "make up": "the walk-through fixture's services on free ports, clouds.yaml and "
               "schedule.yaml",
    "./compute.py --config run/compute.yaml > run/compute.log 2>&1 &":
        "the fixture's compute on a hypervisor host of its own",
    "kill %1": "the fixture stops its compute",
    "make down": "the fixture stops every service it started",
}
UUID = re.compile(r"\b[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}\b")


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


def _workdir(tmp_path: Path, on: Walk) -> tuple[Path, dict[str, str]]:
    """A directory the tutorial's relative paths work in (run/clouds.yaml, .venv-clients,
    ./schedule.py), and its environment: `ssh` in the hypervisor host's namespace."""
    work = tmp_path / "tutorial"
    (work / "run").mkdir(parents=True)
    (work / ".venv-clients").symlink_to(REPO / ".venv-clients")
    (work / "schedule.py").symlink_to(REPO / "schedule.py")
    (work / "run" / "clouds.yaml").symlink_to(on.shells.env["OS_CLIENT_CONFIG_FILE"])
    (work / "run" / "schedule.yaml").symlink_to(on.schedule_yaml)
    tools = work / "tools-of-the-test"
    tools.mkdir()
    ssh = tools / "ssh"
    # The first value of an option wins: the test's known-hosts file, never root's.
    ssh.write_text("#!/bin/sh\nexec ip netns exec " + on.hypervisor.space.netns
                   + " /usr/bin/ssh -F none -o BatchMode=yes -o ConnectTimeout=20 "
                   f"-o UserKnownHostsFile={tmp_path / 'known_hosts'} \"$@\"\n")
    ssh.chmod(0o755)
    env = {key: value for key, value in os.environ.items() if not key.startswith("OS_")}
    env["PATH"] = f"{tools}:{env['PATH']}"
    return work, env


# A guest booted under TCG and logged in to, after the walk-through's fixtures start
# (Keystone, Glance, the API, a hypervisor host).
@pytest.mark.timeout(600)
def test_the_tutorial_runs_as_written(walk: Walk, tmp_path: Path,  # noqa: F811
                                      placement: PlacementClient) -> None:
    steps = commands(TUTORIAL.read_text())
    standing_in = [line for block in steps for line in block if line in STANDS_IN]
    assert sorted(standing_in) == sorted(STANDS_IN), "a line named here left the tutorial"
    work, env = _workdir(tmp_path, walk)
    script = ["set -euo pipefail"]
    for number, block in enumerate(steps):
        script.append(f"echo '@@ block {number}'")
        script += [":" if line in STANDS_IN else line.replace(IMAGE, walk.image)
                   for line in block]
    done = subprocess.run(["bash", "-c", "\n".join(script)], cwd=work, env=env,
                          capture_output=True, text=True, timeout=540, check=False)
    walk.log.append(done.stdout + done.stderr)
    assert done.returncode == 0, (done.stdout + done.stderr)[-4000:]
    said = {int(part.split("\n", 1)[0]): part.split("\n", 1)[1] if "\n" in part else ""
            for part in done.stdout.split("@@ block ")[1:]}
    created, logged_in, looked = (said[index] for index in _indexes(steps))

    (server,) = {match for match in UUID.findall(created)
                 if re.search(rf"\|\s*id\s*\|\s*{match}", created)}
    lines = logged_in.strip().splitlines()
    assert lines[0] == "root"  # the guest's user, over SSH with the tutorial's key
    assert lines[-1] == server  # the metadata service's answer to the guest, over SSH
    assert server in looked  # schedule.py list: the operator's view of the same instance
    # Clean up as the tutorial says: nothing of the server is left in Placement.
    assert placement.get_allocations(server)["allocations"] == {}


def _indexes(steps: list[list[str]]) -> tuple[int, int, int]:
    """Which blocks create the server, log in, and look around."""
    def first(word: str) -> int:
        return next(index for index, block in enumerate(steps)
                    if any(word in line for line in block))

    return first("server create"), first("ssh -i"), first("schedule.py")

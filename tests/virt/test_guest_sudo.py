"""The test guest's `sudo` (tools/build-test-guest.sh): Tempest's scenario tests run their
commands in a guest as `sudo sh -c "..."`, `sudo mount ...`, `sudo -n ...`; root is the
guest's one user, so the shim runs the command as it is, its options dropped and its
arguments kept whole. Run by this machine's busybox."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest


@pytest.fixture(scope="module")
def sudo(guest_root: Path) -> Path:
    return guest_root / "bin" / "sudo"


@pytest.mark.parametrize(("argv", "printed"), [
    (["sh", "-c", 'echo "a  b" >&1; echo $0'], "a  b\nsh\n"),
    (["-n", "echo", "one two"], "one two\n"),
    (["-E", "-u", "root", "--", "printf", "%s|", "-n"], "-n|"),
])
def test_sudo_runs_the_command_as_it_is(sudo: Path, argv: list[str], printed: str) -> None:
    done = subprocess.run(["busybox", "sh", str(sudo), *argv], capture_output=True,
                          text=True, check=False, timeout=30)
    assert (done.returncode, done.stdout) == (0, printed), done.stderr


def test_sudo_passes_the_commands_status_on(sudo: Path) -> None:
    done = subprocess.run(["busybox", "sh", str(sudo), "sh", "-c", "exit 3"],
                          capture_output=True, text=True, check=False, timeout=30)
    assert done.returncode == 3

"""./compute.py, ./schedule.py and ./cluster.py run as written after `make install`, from a
clean environment, with the system's python3 (which lacks our dependencies): under the
project's .venv, or with one line saying to run `make install` when there is none."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from tests.support import REPO, unavailable

SYSTEM_PYTHON = Path("/usr/bin/python3")
CLEAN_ENV = {"PATH": "/usr/bin:/bin", "LANG": "C.UTF-8"}


def run(argv: list[str], cwd: Path = REPO) -> subprocess.CompletedProcess[str]:
    return subprocess.run(argv, cwd=cwd, env=CLEAN_ENV, capture_output=True, text=True,
                          timeout=60)


@pytest.fixture
def system_python() -> Path:
    if not SYSTEM_PYTHON.exists():
        unavailable("no system python3 at /usr/bin/python3")
    if not (REPO / ".venv" / "bin" / "python").exists():
        unavailable("no .venv (make install)")
    return SYSTEM_PYTHON


@pytest.mark.parametrize(("script", "usage"), [
    ("schedule.py", "usage: schedule.py [--config PATH] (QUERY | UUID | COMMAND ...)"),
    ("compute.py", "usage: compute.py"),
    ("cluster.py", "usage: cluster.py"),
])
def test_each_entry_point_runs_as_written(system_python, script, usage):
    assert os.access(REPO / script, os.X_OK), f"{script} is not executable"
    done = run([f"./{script}", "--help"])  # its #! line: the python3 on PATH, the system's
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith(usage) and done.stderr == ""


def test_an_interpreter_without_the_dependencies_hands_over_to_the_venv(system_python):
    # -S: no site-packages at all, so nothing of ours can be imported by it.
    done = run([str(system_python), "-S", "./schedule.py", "stop", "--help"])
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("usage: schedule.py stop") and "--count" not in done.stdout
    # Exit statuses come through the hand-over unchanged.
    refused = run([str(system_python), "-S", "./schedule.py", "frobnicate"])
    assert refused.returncode == 2 and "'frobnicate' is not a query" in refused.stderr


def test_without_a_venv_one_line_says_to_run_make_install(system_python, tmp_path):
    (tmp_path / "etcd_compute").symlink_to(REPO / "etcd_compute")
    shutil.copy(REPO / "schedule.py", tmp_path / "schedule.py")
    done = run([str(system_python), "-S", "./schedule.py", "--help"], cwd=tmp_path)
    assert done.returncode == 2 and done.stdout == ""
    assert done.stderr.startswith("schedule.py: error: ") and done.stderr.count("\n") == 1
    assert "run make install first" in done.stderr

"""The import contracts of pyproject.toml hold, and break when a layer is crossed. (That
tests/unit mirrors the package: tests/unit/test_layout.py.)"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support import REPO

LINT_IMPORTS = Path(sys.executable).with_name("lint-imports")


def lint_imports(root: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(LINT_IMPORTS), "--no-cache"], cwd=root, capture_output=True,
                          text=True, timeout=120, env={**os.environ, "PYTHONPATH": str(root)})


@pytest.fixture
def copy_of_the_package(tmp_path: Path) -> Path:
    if not LINT_IMPORTS.exists():
        pytest.fail("lint-imports is not installed (make install)")
    shutil.copytree(REPO / "etcd_compute", tmp_path / "etcd_compute",
                    ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(REPO / "pyproject.toml", tmp_path)
    return tmp_path


def test_the_contracts_hold_on_this_tree(copy_of_the_package):
    result = lint_imports(copy_of_the_package)
    assert result.returncode == 0, result.stdout[-2000:]
    assert "broken" in result.stdout and "0 broken" in result.stdout


@pytest.mark.parametrize(("module", "line", "contract"), [
    ("scheduler/filters.py", "from etcd_compute.compute import pool",
     "The operator's side never imports host-side code"),
    ("ops/operations.py", "from etcd_compute.virt import disks",
     "The operator's side never imports host-side code"),
    ("compute/machine.py", "from etcd_compute.scheduler import planner",
     "The compute daemon never imports the operator's side"),
    ("compute/machine.py", "from etcd_compute.controller import election",
     "The compute daemon never imports the operator's side"),
    ("drivers/fake.py", "from etcd_compute import etcd",
     "Hypervisor code knows neither etcd, Placement nor instances"),
    ("virt/disks.py", "from etcd_compute.instances import states",
     "Hypervisor code knows neither etcd, Placement nor instances"),
    ("instances/states.py", "from etcd_compute.scheduler import planner", "Layers"),
    ("errors.py", "from etcd_compute import etcd", "Layers"),
    ("controller/batcher.py", "from etcd_compute.ops import operations", "Layers"),
    ("instances/states.py", "from etcd_compute.instances import records",
     "Instance model: states, ownership, records, then its writers"),
    ("instances/host.py", "from etcd_compute.instances import actions",
     "Instance model: states, ownership, records, then its writers"),
    ("controller/batcher.py", "from etcd_compute.controller import queue_service",
     "Controller: the daemon over its service and decisions"),
    ("compute/pool.py", "from etcd_compute.compute import machine",
     "Compute daemon: the service over the machine over its parts"),
    # A circle anywhere, even between modules no layers contract orders.
    ("compute/actions.py", "from etcd_compute.compute import machine",
     "No import circle among the modules of a package"),
    ("mdserver/content.py", "from etcd_compute.mdserver import server",
     "No import circle among the modules of a package"),
])
def test_crossing_a_layer_breaks_a_contract(copy_of_the_package, module, line, contract):
    path = copy_of_the_package / "etcd_compute" / module
    path.write_text(path.read_text() + f"\n{line}  # noqa\n")
    result = lint_imports(copy_of_the_package)
    assert result.returncode != 0
    assert f"{contract} BROKEN" in result.stdout


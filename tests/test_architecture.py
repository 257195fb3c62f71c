"""The import contracts of pyproject.toml hold, and break when a layer is crossed; every module
of the package has its unit test file (tests/unit mirrors etcd_compute/)."""

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
     "The scheduler (the operator's side) never imports host-side code"),
    ("compute/machine.py", "from etcd_compute.scheduler import planner",
     "The compute daemon never imports the scheduler"),
    ("instances.py", "from etcd_compute.scheduler import planner", "Layers"),
    ("errors.py", "from etcd_compute import etcd", "Layers"),
])
def test_crossing_a_layer_breaks_a_contract(copy_of_the_package, module, line, contract):
    path = copy_of_the_package / "etcd_compute" / module
    path.write_text(path.read_text() + f"\n{line}  # noqa\n")
    result = lint_imports(copy_of_the_package)
    assert result.returncode != 0
    assert f"{contract} BROKEN" in result.stdout


# --- tests/unit mirrors the package ----------------------------------------------------------


def missing_mirrors(package: Path, unit_tests: Path) -> list[str]:
    """Modules of `package` without their unit test file: `a/b.py` -> `a/test_b.py` under
    `unit_tests` (package markers and `python -m` entry points excepted)."""
    missing = []
    for module in sorted(package.rglob("*.py")):
        if module.name in ("__init__.py", "__main__.py"):
            continue
        relative = module.relative_to(package)
        mirror = unit_tests / relative.parent / f"test_{relative.name}"
        if not mirror.is_file():
            missing.append(f"{package.name}/{relative} -> "
                           f"tests/unit/{mirror.relative_to(unit_tests)}")
    return missing


def test_every_module_has_its_unit_test_file():
    missing = missing_mirrors(REPO / "etcd_compute", REPO / "tests" / "unit")
    assert not missing, "modules without a mirror in tests/unit:\n" + "\n".join(missing)


def test_a_module_without_its_unit_test_file_is_named(tmp_path):
    package, unit = tmp_path / "etcd_compute", tmp_path / "unit"
    for path in ("__init__.py", "__main__.py", "top.py", "sub/__init__.py", "sub/leaf.py",
                 "sub/other.py"):
        (package / path).parent.mkdir(parents=True, exist_ok=True)
        (package / path).write_text("")
    for path in ("test_top.py", "sub/test_leaf.py", "test_other.py"):  # other: in the wrong dir
        (unit / path).parent.mkdir(parents=True, exist_ok=True)
        (unit / path).write_text("")
    assert missing_mirrors(package, unit) == [
        "etcd_compute/sub/other.py -> tests/unit/sub/test_other.py"]

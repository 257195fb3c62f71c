"""tests/unit mirrors the package, one file per module:

    etcd_compute/foo/bar.py       is tested in  tests/unit/foo/test_bar.py
    etcd_compute/foo/__init__.py  (own code)    tests/unit/foo/test_init.py

A package's `__init__.py` that only marks the package (a docstring, imports, `__all__`,
constants) needs no test file; one with code of its own (a function, a class, a call run at
import) does. Every other exception is listed below with its reason, and a test file of
tests/unit that mirrors no module is stale unless listed too.
"""

from __future__ import annotations

import ast
from pathlib import Path

from tests.support import REPO

PACKAGE = "etcd_compute"
UNIT = "tests/unit"

# Modules that need no mirror, and why.
NO_MIRROR = {
    # The `python -m etcd_compute.mdserver` entry point (import main, exit with its status):
    # main() is tested in tests/unit/mdserver/test_server.py, the process in tests/virt.
    "etcd_compute/mdserver/__main__.py",
}

# Test files of tests/unit that mirror no module of the package, and why.
NOT_A_MIRROR = {
    "tests/unit/test_layout.py",  # this file: the rule itself
    "tests/unit/test_support.py",  # tests/support.py, the test harness's CI switch
    # instances.py's lifecycle half (the actions table, an action's transactions, power
    # changes, a stopped instance moved): test_instances.py would pass 700 lines with it.
    "tests/unit/test_instances_lifecycle.py",
}


def marks_a_package(init: Path) -> bool:
    """True if this `__init__.py` holds no code of its own: docstring, imports, constants."""
    for node in ast.parse(init.read_text()).body:
        if isinstance(node, ast.Import | ast.ImportFrom):
            continue
        if isinstance(node, ast.Expr | ast.Assign | ast.AnnAssign) and \
                isinstance(node.value, ast.Constant | ast.List | ast.Tuple) and \
                all(isinstance(element, ast.Constant) for element in
                    getattr(node.value, "elts", [node.value])):
            continue
        return False
    return True


def mirror_of(module: Path) -> Path:
    """foo/bar.py -> foo/test_bar.py; foo/__init__.py -> foo/test_init.py (relative paths)."""
    name = "init" if module.name == "__init__.py" else module.stem
    return module.with_name(f"test_{name}.py")


def module_of(test: Path) -> Path:
    """The inverse of mirror_of."""
    name = test.stem.removeprefix("test_")
    return test.with_name("__init__.py" if name == "init" else f"{name}.py")


def missing_mirrors(root: Path, no_mirror: set[str] = NO_MIRROR) -> list[str]:
    """One line per module of `root`/etcd_compute without its test file."""
    package, unit = root / PACKAGE, root / UNIT
    missing = []
    for module in sorted(package.rglob("*.py")):
        relative = module.relative_to(package)
        if f"{PACKAGE}/{relative}" in no_mirror or \
                module.name == "__init__.py" and marks_a_package(module):
            continue
        if not (unit / mirror_of(relative)).is_file():
            missing.append(f"{PACKAGE}/{relative} has no {UNIT}/{mirror_of(relative)}")
    return missing


def stale_mirrors(root: Path, not_a_mirror: set[str] = NOT_A_MIRROR) -> list[str]:
    """One line per test file of `root`/tests/unit whose module is not in the package."""
    package, unit = root / PACKAGE, root / UNIT
    stale = []
    for test in sorted(unit.rglob("test_*.py")):
        relative = test.relative_to(unit)
        if f"{UNIT}/{relative}" in not_a_mirror:
            continue
        if not (package / module_of(relative)).is_file():
            stale.append(f"{UNIT}/{relative} has no module {PACKAGE}/{module_of(relative)}")
    return stale


def outdated_exceptions(root: Path) -> list[str]:
    """Listed exceptions that no longer hold (the file went, or now has its mirror)."""
    found = [f"{path} is in NO_MIRROR but does not exist" for path in sorted(NO_MIRROR)
             if not (root / path).is_file()]
    found += [f"{path} is in NO_MIRROR but has {UNIT}/{mirror_of(Path(path).relative_to(PACKAGE))}"
              for path in sorted(NO_MIRROR)
              if (root / UNIT / mirror_of(Path(path).relative_to(PACKAGE))).is_file()]
    found += [f"{path} is in NOT_A_MIRROR but does not exist" for path in sorted(NOT_A_MIRROR)
              if not (root / path).is_file()]
    return found


def test_every_module_has_its_unit_test_file():
    missing = missing_mirrors(REPO)
    assert not missing, "\n".join(missing)


def test_every_unit_test_file_has_its_module():
    stale = stale_mirrors(REPO)
    assert not stale, "\n".join(stale)


def test_the_exceptions_still_hold():
    outdated = outdated_exceptions(REPO)
    assert not outdated, "\n".join(outdated)


# -- the rule itself, on a made-up tree ------------------------------------------------------


def write(root: Path, files: dict[str, str]) -> None:
    for path, text in files.items():
        (root / path).parent.mkdir(parents=True, exist_ok=True)
        (root / path).write_text(text)


def test_a_module_without_its_test_file_is_named_in_one_line(tmp_path):
    write(tmp_path, {
        "etcd_compute/__init__.py": '"""Doc."""\n\n__version__ = "1"\n',
        "etcd_compute/top.py": "",
        "etcd_compute/sub/__init__.py": "from etcd_compute.sub.leaf import x\n__all__ = ['x']\n",
        "etcd_compute/sub/leaf.py": "",
        "etcd_compute/sub/other.py": "",  # its test is in the wrong directory
        "etcd_compute/code/__init__.py": "def helper():\n    pass\n",  # code of its own
        "etcd_compute/call/__init__.py": "import os\nos.getpid()\n",  # runs at import
        "etcd_compute/sub/__main__.py": "",  # excepted below
        "tests/unit/test_top.py": "",
        "tests/unit/sub/test_leaf.py": "",
        "tests/unit/test_other.py": "",
    })
    assert missing_mirrors(tmp_path, no_mirror={"etcd_compute/sub/__main__.py"}) == [
        "etcd_compute/call/__init__.py has no tests/unit/call/test_init.py",
        "etcd_compute/code/__init__.py has no tests/unit/code/test_init.py",
        "etcd_compute/sub/other.py has no tests/unit/sub/test_other.py",
    ]


def test_a_test_file_without_its_module_is_named_in_one_line(tmp_path):
    write(tmp_path, {
        "etcd_compute/__init__.py": "",
        "etcd_compute/sub/__init__.py": "",
        "etcd_compute/sub/leaf.py": "",
        "tests/unit/test_init.py": "",
        "tests/unit/sub/test_leaf.py": "",
        "tests/unit/sub/test_init.py": "",
        "tests/unit/sub/helpers.py": "",  # not a test file
        "tests/unit/sub/test_gone.py": "",  # its module was removed or renamed
        "tests/unit/old/test_leaf.py": "",  # its package was
        "tests/unit/test_rule.py": "",  # excepted below
    })
    assert stale_mirrors(tmp_path, not_a_mirror={"tests/unit/test_rule.py"}) == [
        "tests/unit/old/test_leaf.py has no module etcd_compute/old/leaf.py",
        "tests/unit/sub/test_gone.py has no module etcd_compute/sub/gone.py",
    ]

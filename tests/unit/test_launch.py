"""launch.py: an entry script runs its command, or hands over to the project's .venv once
when this interpreter lacks a dependency, or says in one line to run `make install`; and
spares the garbage collector the start-up and the exit."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from etcd_compute import launch
from tests.support import REPO


@pytest.fixture
def spared(monkeypatch: pytest.MonkeyPatch) -> list[bool]:
    """Each time main spared the collector (this test process's is left alone)."""
    calls: list[bool] = []
    monkeypatch.setattr(launch, "spare_the_collector", lambda: calls.append(True))
    return calls


@pytest.fixture
def commands(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, spared: list[bool]) -> Path:
    """Importable command modules: one that runs, one that needs what is not installed, one
    whose own code is broken."""
    (tmp_path / "fine_command.py").write_text("def main(argv):\n    return len(argv) + 40\n")
    (tmp_path / "needy_command.py").write_text("import no_such_dependency_here\n")
    (tmp_path / "broken_command.py").write_text("import etcd_compute.no_such_module\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delenv(launch.REEXEC, raising=False)
    for name in ("fine_command", "needy_command", "broken_command"):
        sys.modules.pop(name, None)
    return tmp_path


def script_with_venv(root: Path) -> str:
    python = root / ".venv" / "bin" / "python"
    python.parent.mkdir(parents=True)
    python.write_text("")
    return str(root / "schedule.py")


def test_a_command_that_imports_runs_here(commands, monkeypatch, spared):
    monkeypatch.setenv(launch.REEXEC, "1")  # we are the run under .venv: it is forgotten
    assert launch.main("fine_command", str(commands / "schedule.py"), ["a", "b"],
                       run_again=pytest.fail) == 42
    assert launch.REEXEC not in os.environ
    assert spared == [True]


def test_a_missing_dependency_hands_over_to_the_venv_with_the_same_words(commands):
    script = script_with_venv(commands)
    handed: list[tuple] = []

    def run_again(python: Path, script_: str, argv: list[str]) -> None:
        handed.append((python, script_, argv))
        raise SystemExit(0)  # what os.execve does to us, in effect

    with pytest.raises(SystemExit):
        launch.main("needy_command", script, ["stop", "--help"], run_again=run_again)
    assert handed == [(commands / ".venv" / "bin" / "python", script, ["stop", "--help"])]


def test_never_twice(commands, monkeypatch, capsys):
    script = script_with_venv(commands)
    monkeypatch.setenv(launch.REEXEC, "1")
    assert launch.main("needy_command", script, [], run_again=pytest.fail) == 2
    err = capsys.readouterr().err
    assert err.startswith("schedule.py: error: ") and err.count("\n") == 1
    assert "cannot import no_such_dependency_here: run make install first" in err


def test_not_again_under_the_venv_that_runs_now(commands, monkeypatch):
    script = script_with_venv(commands)
    monkeypatch.setattr(sys, "prefix", str(commands / ".venv"))
    assert launch.main("needy_command", script, [], run_again=pytest.fail) == 2


def test_without_a_venv_one_line_says_to_run_make_install(commands, capsys):
    assert launch.main("needy_command", str(commands / "cluster.py"), [],
                       run_again=pytest.fail) == 2
    assert "cluster.py: error: " in capsys.readouterr().err


def test_our_own_broken_import_is_not_hidden(commands):
    with pytest.raises(ModuleNotFoundError, match="etcd_compute.no_such_module"):
        launch.main("broken_command", script_with_venv(commands), [], run_again=pytest.fail)


def test_the_venv_is_next_to_the_script_it_runs(tmp_path):
    (tmp_path / "checkout").mkdir()
    (tmp_path / "bin").mkdir()
    link = tmp_path / "bin" / "schedule.py"
    link.symlink_to(tmp_path / "checkout" / "schedule.py")
    assert launch.venv_python(str(link)) == tmp_path / "checkout" / ".venv" / "bin" / "python"


SPARED = """
import atexit, gc, os, time
atexit.register(lambda: print("frozen at exit:", gc.get_freeze_count() > 0, flush=True))
from etcd_compute import launch
launch.spare_the_collector(0.3)
print("starting:", gc.isenabled())
time.sleep(1.0)
print("after:", gc.isenabled(), flush=True)
pid = os.fork()
if pid == 0:
    off = not gc.isenabled()
    time.sleep(1.0)
    os._exit(0 if off and gc.isenabled() else 1)
print("forked child off, then on:", os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]) == 0)
"""


def test_the_collector_is_off_while_starting_also_in_a_forked_child_and_frozen_at_exit():
    said = subprocess.run([sys.executable, "-c", SPARED], cwd=REPO, capture_output=True,
                          text=True, timeout=60, check=True).stdout.splitlines()
    assert said == ["starting: False", "after: True", "forked child off, then on: True",
                    "frozen at exit: True"]

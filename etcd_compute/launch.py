"""`./compute.py`, `./schedule.py`, `./cluster.py` run as written, whatever python3 runs them.

The entry scripts start with `#!/usr/bin/env python3`: the python3 on PATH, often the
system's, which lacks our dependencies (they are in the project's `.venv`, which
`make install` builds). `main` imports the command's module; when a dependency is
missing and the project's `.venv/bin/python` exists and is not what runs now, the same
command runs again under it, once (an environment variable stops a second try); without
it, one line says to run `make install` first (exit status 2).

Standard library only: this runs before anything else of ours can be imported.
"""

from __future__ import annotations

import atexit
import gc
import importlib
import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import NoReturn

# Set in the environment of the run under .venv/bin/python: never re-executed twice.
REEXEC = "ETCD_COMPUTE_REEXEC"


def venv_python(script: str) -> Path:
    """The project's interpreter, next to the entry script (`.venv/bin/python`)."""
    return Path(script).resolve().parent / ".venv" / "bin" / "python"


def running_under(python: Path) -> bool:
    """Whether the interpreter running now is `python`'s virtualenv."""
    try:
        return Path(sys.prefix).resolve() == python.parent.parent.resolve()
    except OSError:
        return False


def reexec(python: Path, script: str, argv: list[str]) -> NoReturn:
    os.execve(str(python), [str(python), script, *argv], {**os.environ, REEXEC: "1"})


def main(module: str, script: str, argv: list[str],
         run_again: Callable[[Path, str, list[str]], None] = reexec) -> int:
    """Run `module`'s main(argv), under the project's .venv if this interpreter cannot."""
    # At exit the interpreter collects garbage over every object the process made (modules,
    # classes, protobuf descriptors): some 30 ms, a sixth of a schedule.py command's CPU, to
    # free what the exit frees anyway. Frozen objects are left out of that collection
    # (refcounts still free what they free, and atexit handlers, registered later, run
    # first: logging's flush among them).
    atexit.unregister(gc.freeze)
    atexit.register(gc.freeze)
    try:
        entry = importlib.import_module(module)
    except ModuleNotFoundError as exc:
        missing = exc.name or "?"
        if missing.split(".")[0] == "etcd_compute":
            raise  # our own code is broken: no other interpreter fixes that
        python = venv_python(script)
        if python.exists() and not os.environ.get(REEXEC) and not running_under(python):
            run_again(python, script, argv)
        print(f"{Path(script).name}: error: {sys.executable} cannot import {missing}: run "
              "make install first (it builds .venv)", file=sys.stderr)
        return 2
    os.environ.pop(REEXEC, None)  # what this command starts is not a re-execution
    return int(entry.main(argv))

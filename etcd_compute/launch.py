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
import threading
from collections.abc import Callable
from pathlib import Path
from typing import NoReturn

# Set in the environment of the run under .venv/bin/python: never re-executed twice.
REEXEC = "ETCD_COMPUTE_REEXEC"
# How long the garbage collector is off while a process starts (`spare_the_collector`):
# a command's or a daemon's start takes a fraction of it quiet, about all of it on a loaded
# machine (the test suite's).
START_SECONDS = 2.0


def venv_python(script: str) -> Path:
    """The project's interpreter, next to the entry script (`.venv/bin/python`)."""
    return Path(script).resolve().parent / ".venv" / "bin" / "python"


def running_under(python: Path) -> bool:
    """Whether the interpreter running now is `python`'s virtualenv."""
    try:
        return Path(sys.prefix).resolve() == python.parent.parent.resolve()
    except OSError:
        return False


def spare_the_collector(start_seconds: float = START_SECONDS) -> None:
    """Keep Python's cyclic garbage collector from work that frees nothing.

    A process of ours spends its first fraction of a second importing modules and making
    its clients: objects that live as long as it does. The collector's passes over them
    then free nothing (~5-8 ms of a command's CPU; ~100 ms of a compute API worker's, which
    imports the whole API after gunicorn forks it), so it is off for the first
    `start_seconds`, which most commands end within, and on again after them (a timer
    thread); the same in a child forked from us (gunicorn's workers), from the fork on.
    At exit the interpreter collects over every object once more (~30 ms of a command's
    ~160) to free what the exit frees anyway: frozen objects are left out of that
    (refcounts still free what they free; atexit handlers registered later, logging's
    flush among them, run first)."""

    def pause() -> None:
        gc.disable()
        timer = threading.Timer(start_seconds, gc.enable)
        timer.daemon = True
        timer.start()

    pause()
    os.register_at_fork(after_in_child=pause)
    atexit.unregister(gc.freeze)
    atexit.register(gc.freeze)


def reexec(python: Path, script: str, argv: list[str]) -> NoReturn:
    os.execve(str(python), [str(python), script, *argv], {**os.environ, REEXEC: "1"})


def main(module: str, script: str, argv: list[str],
         run_again: Callable[[Path, str, list[str]], None] = reexec) -> int:
    """Run `module`'s main(argv), under the project's .venv if this interpreter cannot."""
    spare_the_collector()
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

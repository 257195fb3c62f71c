"""One of our modules run as a child process (`python -m MODULE`), from any directory.

The package runs from a checkout, not installed: a child finds it only if its directory
is on the child's path, and a daemon's working directory (systemd's `/`, a benchmark's
run directory) need not hold it. `module_command` puts it there first, in the command
line itself, so whatever runs the command (with whatever environment) gets the module.
"""

from __future__ import annotations

import sys
from pathlib import Path

# The directory holding the package.
PACKAGE_ROOT = str(Path(__file__).resolve().parent.parent)
# argv[1]: the directory, argv[2]: the module; the module sees the rest as its arguments.
_BOOTSTRAP = ("import runpy, sys; sys.path.insert(0, sys.argv.pop(1)); "
              "runpy.run_module(sys.argv.pop(1), run_name='__main__', alter_sys=True)")


def module_command(module: str, *args: str) -> list[str]:
    """The command line that runs `module` of this package as `__main__` with `args`, under
    this interpreter, from any working directory."""
    return [sys.executable, "-c", _BOOTSTRAP, PACKAGE_ROOT, module, *args]

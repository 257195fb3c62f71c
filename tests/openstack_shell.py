"""The `openstack` command line, started once and fed one command after another.

Run under `.venv-clients/bin/python` (python-openstackclient's own virtualenv), it reads
one JSON list of arguments per line on stdin, runs each through `openstackclient.shell.
main` (the function the `openstack` script calls: the same parsing, plugins, clouds.yaml,
Keystone session and output formatters) and answers one JSON line {"code", "stdout",
"stderr"} per command. What it saves is the interpreter's start and the client's imports
(1.3 s a command on a quiet machine, 2-3 s on a loaded one), not any step of the command.

`OpenStackShells` (below) is the tests' side: `run(cloud, *args)` returns a
CompletedProcess as `subprocess.run` would, and a command past its timeout kills its
shell (the next command starts another). Each cloud (user) has a shell of its own: one
process that ran commands as one user answered another user's `server show` with the
first one's server (state kept between runs inside the client), so no process ever runs
commands of two clouds.
"""

from __future__ import annotations

import contextlib
import io
import json
import logging
import select
import subprocess
import sys
import time
from pathlib import Path

# What the shell answers on; stdout itself is the command's (redirected per command).
_ANSWERS = sys.stdout


def _serve() -> None:
    from openstackclient.shell import main

    for line in sys.stdin:
        argv = json.loads(line)
        out, err = io.StringIO(), io.StringIO()
        # Each run configures logging again (cliff adds its console handler to the root
        # logger): start every command with none, as a new process does.
        logging.getLogger().handlers.clear()
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            try:
                code = main(argv)
            except SystemExit as exc:  # argparse's --help and usage errors
                code = exc.code if isinstance(exc.code, int) else 1
            except Exception as exc:  # noqa: BLE001 (a crash is the command's answer)
                print(f"{type(exc).__name__}: {exc}", file=err)
                code = 1
        _ANSWERS.write(json.dumps({"code": code, "stdout": out.getvalue(),
                                   "stderr": err.getvalue()}) + "\n")
        _ANSWERS.flush()


class OpenStackShell:
    """A long-lived `openstack` for a test: `run(*args, timeout=...)`."""

    def __init__(self, python: Path, env: dict[str, str]):
        self.python, self.env = python, env
        self.process: subprocess.Popen[str] | None = None

    def _started(self) -> subprocess.Popen[str]:
        if self.process is None or self.process.poll() is not None:
            self.process = subprocess.Popen(
                [str(self.python), __file__], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                stderr=subprocess.DEVNULL, text=True, env=self.env, cwd="/")
        return self.process

    def run(self, *args: str, timeout: float) -> subprocess.CompletedProcess[str]:
        process = self._started()
        assert process.stdin is not None and process.stdout is not None
        process.stdin.write(json.dumps(list(args)) + "\n")
        process.stdin.flush()
        deadline = time.monotonic() + timeout
        while True:
            left = deadline - time.monotonic()
            ready, _, _ = select.select([process.stdout], [], [], max(left, 0))
            if ready:
                break
            if left <= 0:
                self.close()
                raise subprocess.TimeoutExpired(["openstack", *args], timeout)
        line = process.stdout.readline()
        if not line:
            code = process.wait()
            self.process = None
            return subprocess.CompletedProcess(["openstack", *args], code or 1, "",
                                               f"the openstack shell exited ({code})")
        answer = json.loads(line)
        return subprocess.CompletedProcess(["openstack", *args], answer["code"],
                                           answer["stdout"], answer["stderr"])

    def close(self) -> None:
        if self.process is not None:
            with contextlib.suppress(OSError):
                self.process.kill()
            self.process.wait()
            self.process = None


class OpenStackShells:
    """`openstack --os-cloud CLOUD ...` for a test, one long-lived shell per cloud."""

    def __init__(self, python: Path, env: dict[str, str]):
        self.python, self.env = python, env
        self.shells: dict[str, OpenStackShell] = {}

    def run(self, cloud: str, *args: str, timeout: float) -> subprocess.CompletedProcess[str]:
        shell = self.shells.setdefault(cloud, OpenStackShell(self.python, self.env))
        return shell.run("--os-cloud", cloud, *args, timeout=timeout)

    def close(self) -> None:
        for shell in self.shells.values():
            shell.close()


if __name__ == "__main__":
    _serve()

"""Open vSwitch's and OVN's command-line tools as our services run them: where they keep
their sockets, pidfiles and logs (a run directory of ours, never /var/run), a database
file made from its schema, and a daemon's control socket asked a command (`*-appctl`).
Shared by OVN's central services (ovn.py), a host's switch (ovs.py) and its chassis
(ovn_controller.py)."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

from etcd_compute.errors import ServiceUnavailable


def environment(run_dir: Path) -> dict[str, str]:
    """Where OVS's and OVN's tools put and look for their sockets, pidfiles and logs."""
    return {"OVS_RUNDIR": str(run_dir), "OVN_RUNDIR": str(run_dir),
            "OVS_LOGDIR": str(run_dir), "OVN_LOGDIR": str(run_dir),
            "OVS_DBDIR": str(run_dir)}


def create_database(file: Path, schema: Path) -> None:
    """`ovsdb-tool create FILE SCHEMA`, unless the file is there already."""
    if file.exists():
        return
    done = subprocess.run(["ovsdb-tool", "create", str(file), str(schema)],
                          capture_output=True, text=True, check=False)
    if done.returncode:
        raise ServiceUnavailable(f"ovsdb-tool create {file}: {done.stderr.strip()[-200:]}")


def run(argv: list[str], run_dir: Path | None = None, timeout: float = 30,
        check: bool = True) -> str:
    """A tool's command line (with `run_dir`'s environment): its output. A failure raises
    RuntimeError with what it said, unless `check` is False (then the output, whatever it
    is)."""
    done = subprocess.run(argv, capture_output=True, text=True, check=False, timeout=timeout,
                          env=None if run_dir is None else {**os.environ,
                                                            **environment(run_dir)})
    if check and done.returncode:
        raise RuntimeError(f"{' '.join(argv)}: {done.stderr.strip()}")
    return done.stdout


def appctl(control: Path, *args: str, program: str = "ovs-appctl", timeout: float = 30,
           check: bool = True) -> str:
    """`PROGRAM -t CONTROL ARGS...`, a command to a daemon's control socket: its output."""
    return run([program, "-t", str(control), *args], timeout=timeout, check=check)

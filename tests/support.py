"""Helpers shared by every layer of tests (fixtures live in conftest.py).

Defined once here: the repository path, the CI switch, waiting, a valid
instance spec, and running the real command-line programs.
"""

from __future__ import annotations

import contextlib
import json
import multiprocessing
import multiprocessing.context
import os
import signal
import subprocess
import sys
import time
import uuid as uuidlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import pytest

from etcd_compute.errors import ServiceUnavailable

REPO = Path(__file__).resolve().parent.parent
S = TypeVar("S")
RESOURCES = {"VCPU": 1, "MEMORY_MB": 64, "DISK_GB": 1}


def in_ci(environ: dict[str, str] | os._Environ[str] = os.environ) -> bool:
    """CI=true, CI=1 or CI=yes (any case): missing services fail the run instead of skipping."""
    return environ.get("CI", "").strip().lower() in ("true", "1", "yes")


IN_CI = in_ci()


def racing_processes(module: str) -> multiprocessing.context.BaseContext:
    """How a test starts processes that race each other: each forked from one server
    (multiprocessing's forkserver, the pytest worker's child until it exits) that
    imported pytest, the scheduler and `module` once. A spawned racer imported them again
    (0.35 s of CPU each, 60 a run); a fork of the pytest worker itself would copy its
    threads' locks."""
    context = multiprocessing.get_context("forkserver")
    # Only the first call's modules are preloaded (the server then runs); a later
    # module is imported by each of its racers, with the rest already there.
    context.set_forkserver_preload(["pytest", "etcd_compute.scheduler", module])
    return context


def unavailable(what: str) -> None:
    """Fail in CI, skip on a developer machine without the service."""
    if in_ci():
        pytest.fail(f"{what} (CI=true: missing services fail the run)", pytrace=False)
    pytest.skip(what)


@contextlib.contextmanager
def running(service: S, start: Callable[[], object] | None = None) -> Iterator[S]:
    """`service` started (by `start`, else its own `start()`) for the with-block and
    stopped after, by pid, even when its start fails half-way or is cut short (a per-test
    timeout, Ctrl-C); a start that fails for want of the service is `unavailable`."""
    try:
        try:
            (start or service.start)()
        except ServiceUnavailable as exc:
            unavailable(str(exc))
        yield service
    finally:
        service.stop()


@contextlib.contextmanager
def timeout_paused() -> Iterator[None]:
    """pytest-timeout's alarm (its signal method: ITIMER_REAL) stopped while this test waits
    its turn behind another run on this machine (`host_lock`, which has a timeout of its
    own), then armed again with the time that was left: the wait is not this test hanging."""
    left, interval = signal.setitimer(signal.ITIMER_REAL, 0)
    try:
        yield
    finally:
        if left:
            signal.setitimer(signal.ITIMER_REAL, left, interval)


def wait_for(predicate: Callable[[], Any], timeout: float = 20.0, interval: float = 0.05,
             what: str = "condition") -> Any:
    """Poll `predicate` until it returns something truthy; fail the test on timeout."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(interval)
    raise AssertionError(f"timed out after {timeout} s waiting for {what}")


def stop_server(server: Any) -> None:
    """Stop a socketserver-style HTTP server (prometheus_client's) now: its loop looks at
    its stop flag only between polls (every 0.5 s) or requests, so a connection wakes it."""
    import socket
    import threading

    stopping = threading.Thread(target=server.shutdown)
    stopping.start()
    while stopping.is_alive():
        try:
            socket.create_connection(server.server_address[:2], timeout=1).close()
        except OSError:
            pass
        stopping.join(0.01)
    server.server_close()


def make_spec(rp_uuid: str, image: str = "file:///dev/null", **extra: Any) -> dict[str, Any]:
    """A valid instance_spec for host `rp_uuid` (a fresh uuid unless `uuid=` is given)."""
    return {
        "action": "build",
        "uuid": str(uuidlib.uuid4()),
        "name": "test",
        "host": rp_uuid,
        "resources": dict(RESOURCES),
        "allocations": {rp_uuid: {"resources": dict(RESOURCES)}},
        "image": {"url": image, "sha256": None},
        "project_id": "p",
        "user_id": "u",
        "requested_at": time.time(),
        **extra,
    }


def domain_spec(uuid: str, **overrides: Any) -> Any:
    """A libvirt DomainSpec for `uuid` with a name that needs escaping (for XML tests)."""
    from etcd_compute.virt.domain import DomainSpec

    values: dict[str, Any] = {
        "uuid": uuid,
        "name": "web <1> & 'two'",
        "memory_mb": 256,
        "vcpus": 2,
        "domain_type": "qemu",
        "disk": Path("/instances") / uuid / "disk.qcow2",
        "config_drive": Path("/instances") / uuid / "config.iso",
        "console_log": Path("/instances") / uuid / "console.log",
        "network": "etcd-compute",
        "bridge": None,
        **overrides,
    }
    return DomainSpec(**values)


@dataclass
class Run:
    """What a command-line program did."""

    code: int
    stdout: str
    stderr: str

    def json(self) -> Any:
        return json.loads(self.stdout)


class Hung(AssertionError):
    """A program still running past its time; the message holds its threads' stacks."""


def run_cli(program: str, *args: str, timeout: float = 60) -> Run:
    """Run `schedule.py` or `compute.py` of this checkout as a real process. One still running
    after `timeout` seconds is a failure (Hung) that shows where each of its threads waits
    (faulthandler's dump on SIGABRT), not a bare timeout."""
    process = subprocess.Popen([sys.executable, str(REPO / program), *args],
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                               cwd=REPO, env={**os.environ, "PYTHONFAULTHANDLER": "1"})
    try:
        stdout, stderr = process.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        process.send_signal(signal.SIGABRT)
        try:
            stdout, stderr = process.communicate(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
            stdout, stderr = process.communicate()
        raise Hung(f"{program} {' '.join(args)}: still running after {timeout:g} s; "
                   f"its stderr and threads:\n{stderr[-8000:]}") from None
    except BaseException:  # interrupted (Ctrl-C, the test's timeout): nothing left running
        process.kill()
        process.communicate()
        raise
    return Run(process.returncode, stdout, stderr)

"""The metadata server as a real process (`python -m etcd_compute.mdserver`) on
127.0.0.1 (random port): idle connections are closed and cost no thread, past 1024 of
them too, requests are bounded. One source's cap against another's answer is in
test_mdserver_fairness.py; which guest sees what, with real guests in test_vm.py."""

from __future__ import annotations

import resource
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest
import requests

from tests.support import REPO, unavailable, wait_for
from tools.local_services import free_port, stop_pid

IDLE_TIMEOUT = 2
# Loopback sources of their own (all of 127/8 is loopback), each up to its cap.
PER_SOURCE = 1000
SOURCES = [f"127.0.0.{n}" for n in range(2, 4)]


def start_mdserver(tmp_path: Path, extra: str = "", idle_timeout: int = IDLE_TIMEOUT,
                   open_files: int | None = None) -> tuple[int, subprocess.Popen[bytes]]:
    port = free_port()
    conf = tmp_path / "mdserver.conf"
    conf.write_text(
        "[mdserver]\nbind_address = 127.0.0.1\n"
        f"port = {port}\ninstances_dir = {tmp_path / 'instances'}\n"
        "libvirt_uri = test:///default\nnetwork = etcd-compute-none\n"
        f"log_file = {tmp_path / 'mdserver.log'}\n"
        f"idle_timeout_seconds = {idle_timeout}\n{extra}"
    )
    pid_file = tmp_path / "mdserver.pid"

    def limit_open_files() -> None:  # as a service manager's default soft limit would
        if open_files:
            resource.setrlimit(resource.RLIMIT_NOFILE,
                               (open_files, resource.getrlimit(resource.RLIMIT_NOFILE)[1]))

    process = subprocess.Popen([sys.executable, "-m", "etcd_compute.mdserver", "--config",
                                str(conf), "--pid-file", str(pid_file)], cwd=REPO,
                               preexec_fn=limit_open_files)
    try:
        wait_for(lambda: pid_file.exists() or process.poll() is not None, 20,
                 what="the metadata server to listen")
        assert process.poll() is None, f"the metadata server exited {process.returncode}"
    except BaseException:
        stop_pid(process.pid)
        raise
    return port, process


@pytest.fixture
def mdserver(tmp_path: Path) -> Iterator[tuple[int, psutil.Process]]:
    """One source may hold 200 here: what is tested is what idle connections cost."""
    port, process = start_mdserver(tmp_path, "connections_per_guest = 200\n")
    try:
        yield port, psutil.Process(process.pid)
    finally:
        stop_pid(process.pid)


def test_idle_connections_are_closed_and_cost_no_thread(mdserver) -> None:
    port, server = mdserver
    assert requests.get(f"http://127.0.0.1:{port}/latest/meta-data/", timeout=5).status_code \
        == 404  # no guest of ours has 127.0.0.1
    baseline = server.num_threads()
    idle = [socket.create_connection(("127.0.0.1", port), timeout=30) for _ in range(200)]
    try:
        time.sleep(0.5)
        busy = server.num_threads()
        print(f"threads: {baseline} before, {busy} with 200 idle connections")
        assert busy <= baseline
        started = time.monotonic()
        for connection in idle:  # each is closed by the server: EOF (or a reset)
            try:
                assert connection.recv(1) == b""
            except ConnectionResetError:
                pass
        seconds = time.monotonic() - started
        print(f"all 200 closed by the server after {seconds:.1f} s "
              f"(idle timeout {IDLE_TIMEOUT} s)")
        # All at once: one idle timeout, idle connections looked for every second.
        assert seconds < IDLE_TIMEOUT + 2
        assert server.num_threads() <= baseline
    finally:
        for connection in idle:
            connection.close()
    assert requests.get(f"http://127.0.0.1:{port}/latest/meta-data/", timeout=5).status_code \
        == 404  # and it still answers


def test_oversized_and_odd_requests_are_refused(mdserver) -> None:
    port, _server = mdserver
    url = f"http://127.0.0.1:{port}/latest/meta-data/"
    huge = requests.get(url, headers={"X-Pad": "x" * 20000}, timeout=5)
    assert huge.status_code == 431 or huge.status_code == 400
    assert requests.post(url, data=b"x" * 10, timeout=5).status_code == 405
    assert requests.post(url, data=b"x" * 100_000, timeout=5).status_code == 413


def test_more_connections_than_select_can_watch_are_held_and_served(tmp_path: Path) -> None:
    """1100 idle connections (descriptors past 1024: select() would fail on them), from a
    server started with a soft limit of 256 open files (it raises its own)."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard != resource.RLIM_INFINITY and hard < 1400:
        unavailable(f"this test needs 1400 open files; the hard limit is {hard}")
    resource.setrlimit(resource.RLIMIT_NOFILE, (max(soft, 1400), hard))  # for this test's end
    port, process = start_mdserver(
        tmp_path, f"connections_per_guest = {PER_SOURCE}\nconnection_limit = 1200\n",
        idle_timeout=60, open_files=256)
    idle: list[socket.socket] = []
    try:
        for index in range(1100):
            connection = socket.socket()
            idle.append(connection)
            connection.bind((SOURCES[index % len(SOURCES)], 0))
            connection.connect(("127.0.0.1", port))
        server = psutil.Process(process.pid)
        wait_for(lambda: server.num_fds() > 1100, 20, what="the server to take them all in")
        answer = requests.get(f"http://127.0.0.1:{port}/latest/meta-data/", timeout=5)
        assert answer.status_code == 404  # served, with 1100 held
        assert process.poll() is None
        print(f"server holds {server.num_fds()} descriptors; soft limit "
              f"{server.rlimit(psutil.RLIMIT_NOFILE)[0]} (started with 256)")
    finally:
        for connection in idle:
            connection.close()
        stop_pid(process.pid)
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))

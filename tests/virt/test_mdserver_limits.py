"""The metadata server as a real process (`python -m etcd_compute.mdserver`) on
127.0.0.1 (random port): idle connections are closed and cost no thread, requests are
bounded. Which guest sees what is tested with real guests in test_vm.py."""

from __future__ import annotations

import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest
import requests

from tests.support import REPO, wait_for
from tools.local_services import free_port, stop_pid

IDLE_TIMEOUT = 2


@pytest.fixture
def mdserver(tmp_path: Path) -> Iterator[tuple[int, psutil.Process]]:
    port = free_port()
    conf = tmp_path / "mdserver.conf"
    conf.write_text(
        "[mdserver]\nbind_address = 127.0.0.1\n"
        f"port = {port}\ninstances_dir = {tmp_path / 'instances'}\n"
        "libvirt_uri = test:///default\nnetwork = etcd-compute-none\n"
        f"log_file = {tmp_path / 'mdserver.log'}\n"
        f"idle_timeout_seconds = {IDLE_TIMEOUT}\n"
    )
    pid_file = tmp_path / "mdserver.pid"
    process = subprocess.Popen([sys.executable, "-m", "etcd_compute.mdserver", "--config",
                                str(conf), "--pid-file", str(pid_file)], cwd=REPO)
    try:
        wait_for(pid_file.exists, 20, what="the metadata server to listen")
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
              f"(idle timeout {IDLE_TIMEOUT} s, at most 100 connections at a time)")
        # Two rounds of the idle timeout (100 connections each), checked every second.
        assert seconds < 2 * (IDLE_TIMEOUT + 2) + 2
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

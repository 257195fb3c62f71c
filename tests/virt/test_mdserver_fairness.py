"""One source cannot stall the metadata server for everyone (issue 18).

The server runs as a real process bound to the gateway address of a private bridge
(tools/local_services/netns.py); two network namespaces on that bridge are two
sources: `greedy` opens many connections and sends nothing on them, `guest` asks
for /latest/meta-data/instance-id and times the answer (a 404 here: neither is a
guest of ours, and the 404 takes the same path as an answer: accept, parse, look the
source up, respond). Which guest sees what is tested with real guests in test_vm.py;
the guest filter's cap in test_mdserver_guest_cap_vm.py.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from etcd_compute.mdserver.settings import MdserverConfig
from tests.support import REPO, unavailable, wait_for
from tools.local_services import free_port, stop_pid
from tools.local_services.netns import TestNetwork, netns_usable

ASKS = 5
# What "does not delay" means (issue 18's "done when": "do not delay another guest's
# answer beyond 50 ms"): the other source's answers, with one source holding its idle
# connections, within this of its answers just before without them (the same run's
# baseline: on a shared machine at load 12 an answer alone took up to 55 ms). A stalled
# server delays the first by up to its idle timeout (10 s).
DELAY_WITHIN_MS = 50
PER_GUEST = MdserverConfig().connections_per_guest  # the default the server runs with


@pytest.fixture(scope="module")
def bridge() -> Iterator[TestNetwork]:
    why = netns_usable()
    if why:
        unavailable(why)
    net = TestNetwork.create()
    try:
        net.add_host("greedy")
        net.add_host("guest")
        yield net
    finally:
        net.delete()


@pytest.fixture
def mdserver(bridge: TestNetwork, tmp_path: Path) -> Iterator[tuple[str, int]]:
    """The metadata server with mdserver.conf's defaults, on the bridge's gateway address."""
    port = free_port()
    conf = tmp_path / "mdserver.conf"
    conf.write_text(
        f"[mdserver]\nbind_address = {bridge.gateway}\nport = {port}\n"
        f"instances_dir = {tmp_path / 'instances'}\n"
        "libvirt_uri = test:///default\nnetwork = etcd-compute-none\n"
        f"log_file = {tmp_path / 'mdserver.log'}\n"
    )
    pid_file = tmp_path / "mdserver.pid"
    process = subprocess.Popen([sys.executable, "-m", "etcd_compute.mdserver", "--config",
                                str(conf), "--pid-file", str(pid_file)], cwd=REPO)
    try:
        wait_for(pid_file.exists, 20, what="the metadata server to listen")
        yield bridge.gateway, port
    finally:
        stop_pid(process.pid)


def client(bridge: TestNetwork, host: str, *args: object) -> list[str]:
    return bridge.run_in(bridge.hosts[host],
                         [sys.executable, "-m", "tests.virt.md_clients", *map(str, args)])


def ask(bridge: TestNetwork, address: str, port: int, times: int) -> dict[str, Any]:
    done = subprocess.run(client(bridge, "guest", "ask", address, port, times), cwd=REPO,
                          capture_output=True, text=True, timeout=times * 40, check=True)
    return json.loads(done.stdout)


@pytest.mark.parametrize("idle", [0, 100, 200])
def test_one_source_holding_idle_connections_does_not_delay_another(
    bridge: TestNetwork, mdserver: tuple[str, int], idle: int
) -> None:
    address, port = mdserver
    ask(bridge, address, port, 1)  # the server's first answer opens its libvirt connection
    baseline = ask(bridge, address, port, ASKS)["ms"]  # no source holds anything
    holder = None
    held: dict[str, Any] = {"opened": 0, "failed": 0}
    try:
        if idle:
            holder = subprocess.Popen(client(bridge, "greedy", "hold", address, port, idle),
                                      cwd=REPO, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                      text=True)
            assert holder.stdin and holder.stdout
            held = json.loads(holder.stdout.readline())
            time.sleep(0.5)  # the server has taken them in (or turned them away)
        started = time.monotonic()
        answers = ask(bridge, address, port, ASKS)
        seconds = time.monotonic() - started
        if holder:
            assert holder.stdin and holder.stdout
            holder.stdin.write("count\n")
            holder.stdin.flush()
            held.update(json.loads(holder.stdout.readline()))
    finally:
        if holder:
            assert holder.stdin
            holder.stdin.close()
            holder.wait(timeout=10)
            stop_pid(holder.pid)
    took = answers["ms"]
    print(f"\n{idle} idle connections from one source ({held}): another source's "
          f"{ASKS} answers took {took} ms ({seconds:.1f} s in all; {baseline} ms before)")
    assert answers["status"] == [404] * ASKS, answers  # every one answered
    # Every answer: the first is the one a stalled server delays (until idle ones time out).
    assert max(took) < max(baseline) + DELAY_WITHIN_MS, (took, baseline)
    # ... while the greedy source held what it may (its cap), and no more.
    if idle:
        assert held == {"opened": idle, "failed": 0, "open": min(idle, PER_GUEST)}, held

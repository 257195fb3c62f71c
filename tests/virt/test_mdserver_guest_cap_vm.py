"""Real guests against the metadata cap: a guest cannot open more than its share of
connections to 169.254.169.254:80, and guests are served while one holds its share.

Guest G (our filter) and the control C (defined without our nwfilter, as in
test_guest_isolation.py) run the same user-data script: open 20 connections to the
metadata server, on each a request that never ends (a byte every 2 s: never idle, so
never timed out), and after a few seconds count them in /proc/net/tcp by state. The
guest filter drops G's SYNs past the cap (they stay SYN-SENT in G, and the server never
hears of them); C's reach the server, which closes those past the cap at once
(mdserver/admission.py). While both hold their caps, guest B boots and reads its
own metadata, and the host (another source) is answered within 50 ms.
"""

from __future__ import annotations

import re
import socket
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import psutil
import pytest

from etcd_compute.drivers.libvirt import LibvirtDriver
from etcd_compute.virt import network, nwfilter
from tests.support import unavailable, wait_for
from tests.virt.conftest import guest_spec, new_uuid
from tests.virt.md_clients import REQUEST
from tests.virt.test_guest_isolation import UnfilteredDriver, console_when, nic_filter
from tests.virt.test_vm import markers

pytestmark = pytest.mark.vm

OPENED = 20
# Hold OPENED connections, trickling; after HOLD_SECONDS count them by state (in
# /proc/net/tcp 169.254.169.254:80 is FEA9FEA9:0050; 01 is ESTABLISHED, 02 SYN-SENT).
HOLD = r"""{first_line}
. /etc/guest-functions
for i in $(seq {opened}); do
    (while :; do printf x; sleep 2; done | nc 169.254.169.254 80 >/dev/null 2>&1) &
done
sleep {hold_seconds}
count() {{ grep -c " FEA9FEA9:0050 $1 " /proc/net/tcp; }}
say "metadata-connections established=$(count 01) syn-sent=$(count 02)"
sleep 900
"""
HOLD_SECONDS = 8
COUNTED = re.compile(r"metadata-connections established=(\d+) syn-sent=(\d+)")


def counted(console: str) -> tuple[int, int]:
    found = [COUNTED.fullmatch(line) for line in markers(console)]
    (match,) = [m for m in found if m]
    return int(match.group(1)), int(match.group(2))


def server_side(guest_ip: str) -> int:
    """Connections the host holds open from `guest_ip` to the metadata server."""
    return sum(1 for c in psutil.net_connections(kind="tcp")
               if c.laddr and c.laddr.ip == network.METADATA_ADDRESS and c.laddr.port == 80
               and c.raddr and c.raddr.ip == guest_ip and c.status == psutil.CONN_ESTABLISHED)


def ask_from_host() -> tuple[float, bytes]:
    """The host is a source too (not a guest: 404); milliseconds to its answer."""
    started = time.monotonic()
    with socket.create_connection((network.METADATA_ADDRESS, 80), timeout=30) as connection:
        connection.sendall(REQUEST)
        answer = b""
        while chunk := connection.recv(4096):
            answer += chunk
    return (time.monotonic() - started) * 1000, answer


def test_a_guest_holds_at_most_its_cap_and_others_are_served_meanwhile(
    vm_config: dict[str, Any], test_guest_image: Path
) -> None:
    why = nwfilter.bridge_netfilter_missing()
    if why:
        unavailable(f"{why} (make install sets it)")
    cap = vm_config["driver"]["libvirt"]["metadata_connections_per_guest"]
    assert OPENED > cap
    log_file = Path(vm_config["compute"]["instances_dir"]).parent / "mdserver.log"
    image = f"file://{test_guest_image}"
    g, c, b = new_uuid(), new_uuid(), new_uuid()
    drivers = [LibvirtDriver(vm_config), UnfilteredDriver(vm_config)]
    driver = drivers[0]
    started = time.monotonic()
    try:
        def build(job: tuple[LibvirtDriver, str]) -> str:
            job_driver, uuid = job
            spec = guest_spec(uuid, image)
            spec["user_data"] = HOLD.format(first_line=f"#!/bin/sh user-data-of-{uuid}",
                                            opened=OPENED, hold_seconds=HOLD_SECONDS)
            return job_driver.build(spec)["ip"]

        with ThreadPoolExecutor(2) as pool:
            g_ip, c_ip = pool.map(build, [(drivers[0], g), (drivers[1], c)])
        assert nic_filter(driver, g) is not None and nic_filter(driver, c) is None
        consoles = {uuid: console_when(driver, uuid, "metadata-connections", 120)
                    for uuid in (g, c)}
        print(f"G {g_ip}: {counted(consoles[g])}, C (no nwfilter) {c_ip}: "
              f"{counted(consoles[c])} (established, SYN-sent) of {OPENED}; "
              f"{time.monotonic() - started:.1f}s")

        # The filter let G open its cap and dropped the rest before the server: they are
        # still trying (SYN-SENT), and the server never had to turn one of G's away.
        assert counted(consoles[g]) == (cap, OPENED - cap), consoles[g]
        # Without the filter every SYN reaches the server, which closes those past the cap.
        assert counted(consoles[c]) == (cap, 0), consoles[c]
        assert server_side(g_ip) == cap and server_side(c_ip) == cap
        refusals = [line for line in log_file.read_text().splitlines()
                    if "its cap (connections_per_guest)" in line]
        assert any(f" {c_ip} holds {cap} connections" in line for line in refusals), refusals
        assert not any(f" {g_ip} holds" in line for line in refusals), refusals

        # Both hold their caps: another guest boots and reads its own metadata, and the
        # host's answer is not delayed.
        took, answer = ask_from_host()
        print(f"the host's answer while G and C hold their caps: {took:.1f} ms")
        assert answer.startswith(b"HTTP/1.0 404 ") and took < 50
        booting = time.monotonic()
        driver.build(guest_spec(b, image))
        console_b = wait_for(lambda: (text := driver.console(b)) and
                             "ETCD-COMPUTE-GUEST ready" in text and text,
                             timeout=180, interval=0.5, what="B to print its markers")
        print(f"B booted and read its metadata in {time.monotonic() - booting:.1f}s "
              "while G and C held their caps")
        assert f"metadata instance-id={b}" in markers(console_b), console_b
        assert f"metadata user-data=user-data-of-{b}" in markers(console_b), console_b
        assert server_side(g_ip) == cap and server_side(c_ip) == cap  # still held
    finally:
        with ThreadPoolExecutor(3) as pool:
            list(pool.map(driver.destroy, (g, c, b)))
        for each in drivers:
            each.close()

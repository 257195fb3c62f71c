"""Two real guests on one bridge: a guest cannot take its neighbour's identity
towards the metadata server, nor reach a control-plane port on the host.

Guest A is honest. Guest B's user-data script (run after its normal markers)
asks the metadata server as A: (i) from A's IP (announced by gratuitous ARP),
(ii) from A's IP and MAC; then
takes back its own identity and reads its own instance-id again (its network
still works), and (iii) tries TCP to a listener on the host (bound to 0.0.0.0,
standing in for etcd/Placement on a routable address) at the gateway and the
host's routable address, also from its port 22 (where its answers to the host's SSH
connections come from, which the filter lets through), and sends UDP to the same port
there and to 224.0.0.1.
The control, guest C, runs the same script on the same bridge but is defined
without our nwfilter: its connections and datagrams arrive and both its
spoofed rounds get A's data. So the filter is what stops B.
"""

from __future__ import annotations

import ipaddress
import select
import socket
import threading
import time
import xml.etree.ElementTree as ET
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest

from etcd_compute.drivers.libvirt import LibvirtDriver
from etcd_compute.virt import nwfilter
from etcd_compute.virt.domain import mac_addresses
from tests.support import wait_for
from tests.virt.conftest import guest_spec, new_uuid
from tests.virt.test_vm import markers

pytestmark = pytest.mark.vm

BANNER = b"stand-in for etcd/Placement\n"
IP_PKTINFO = getattr(socket, "IP_PKTINFO", 8)  # Linux; Python has the name from 3.12

# Run by the test guest after its markers (tools/build-test-guest.sh). {first_line}
# names the guest, so its config-drive and metadata markers show its own user-data.
ATTACK = r"""{first_line}
. /etc/guest-functions
A_IP={a_ip} A_MAC={a_mac} GATEWAY={gateway} PORT={port} TARGETS="{targets}"
own_mac=$(cat /sys/class/net/eth0/address)

# ask PATH: the metadata server's status and the body's first line, or "no answer".
ask() {{
    response=$(printf 'GET /latest/%s HTTP/1.0\r\nHost: 169.254.169.254\r\n\r\n' "$1" \
        | nc -w 2 169.254.169.254 80 | tr -d '\r')
    [ -n "$response" ] || {{ echo "no answer"; return; }}
    printf '%s\n' "$response" | sed -n '1s/^[^ ]* \([0-9]*\).*/\1/p' | tr '\n' ' '
    printf '%s\n' "$response" | sed '1,/^$/d' | head -n1
}}
as_a() {{
    ip route replace 169.254.169.254/32 via "$GATEWAY" dev eth0 src "$A_IP"
    # Gratuitous ARP: the host's answers to A's address come to this NIC.
    arping -q -U -c 1 -I eth0 -s "$A_IP" "$A_IP"
    (say "$1 instance-id=$(ask meta-data/instance-id)") &
    (say "$1 user-data=$(ask user-data)") &
    wait
}}
set_mac() {{
    ip link set dev eth0 down && ip link set dev eth0 address "$1" && ip link set dev eth0 up
}}

ip addr add "$A_IP/32" dev eth0
as_a spoof-ip
set_mac "$A_MAC"
as_a spoof-mac
set_mac "$own_mac"
ip addr del "$A_IP/32" dev eth0
ip route replace default via "$GATEWAY" dev eth0
say "own instance-id=$(ask meta-data/instance-id)"
for target in $TARGETS; do
    (echo probe | nc -w 3 "$target" "$PORT" >/dev/null 2>&1 && result=connected || result=failed
     say "connect $target:$PORT $result") &
done
wait
# From port 22 (its SSH server's, stopped), one at a time: the SSH client binds it
# (busybox nc does not); the listener does not speak SSH, so only it tells whether the
# connection was made.
kill $(pidof dropbear)
for target in $TARGETS; do
    timeout 5 dbclient -y -y -b :22 -p "$PORT" "$target" true </dev/null >/dev/null 2>&1
    say "connect from 22 $target:$PORT tried"
done
# UDP to the host: its addresses, and multicast (all hosts, the host's bridge among them).
for target in $TARGETS 224.0.0.1; do
    (timeout 3 tftp -g -r probe -l /dev/null "$target" "$PORT" >/dev/null 2>&1
     say "udp $target:$PORT sent") &
done
wait
"""


class Listener:
    """TCP and UDP on 0.0.0.0, one port: records who connected and who sent a datagram."""

    def __init__(self) -> None:
        self.tcp = socket.create_server(("0.0.0.0", 0))
        self.port = self.tcp.getsockname()[1]
        self.udp = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self.udp.setsockopt(socket.IPPROTO_IP, IP_PKTINFO, 1)  # tells each one's destination
        self.udp.bind(("0.0.0.0", self.port))
        self.peers: list[str] = []  # TCP
        self.peer_ports: list[tuple[str, int]] = []
        self.datagrams: list[tuple[str, str]] = []  # UDP: (source, destination)
        self.stopping = threading.Event()
        self.thread = threading.Thread(target=self._serve, name="listener", daemon=True)
        self.thread.start()

    def _serve(self) -> None:
        while not self.stopping.is_set():
            ready, _, _ = select.select([self.tcp, self.udp], [], [], 0.2)
            if self.udp in ready:
                _data, ancillary, _flags, (source, _port) = self.udp.recvmsg(
                    2048, socket.CMSG_SPACE(12))
                # struct in_pktinfo: ifindex, local address, the header's destination
                destination = socket.inet_ntoa(ancillary[0][2][8:12])
                self.datagrams.append((source, destination))
            if self.tcp in ready:
                connection, (address, port) = self.tcp.accept()
                with connection:
                    self.peers.append(address)
                    self.peer_ports.append((address, port))
                    connection.sendall(BANNER)

    def close(self) -> None:
        self.stopping.set()
        self.thread.join(timeout=5)
        self.tcp.close()
        self.udp.close()


@pytest.fixture
def listener() -> Iterator[Listener]:
    stand_in = Listener()
    try:
        yield stand_in
    finally:
        stand_in.close()


class UnfilteredDriver(LibvirtDriver):
    """The control: defines its guests without our nwfilter (no filterref on the NIC)."""

    def _ensure_filters(self, groups: list[str] | None = None) -> None:  # type: ignore[override]
        return None


def routable_address() -> str | None:
    """The host's source address for its default route (no packet is sent)."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
        try:
            probe.connect(("198.51.100.1", 9))
        except OSError:
            return None
        return probe.getsockname()[0]


def console_when(driver: LibvirtDriver, uuid: str, marker: str, timeout: float) -> str:
    """The guest's console text once it shows `marker`."""
    def shown() -> str | None:
        text = driver.console(uuid)
        return text if marker in text else None

    return wait_for(shown, timeout=timeout, interval=0.5, what=f"{uuid} to print {marker!r}")


def nic_filter(driver: LibvirtDriver, uuid: str) -> str | None:
    root = ET.fromstring(driver.connection.lookupByName(uuid).XMLDesc(0))
    filterref = root.find("devices/interface/filterref")
    return None if filterref is None else filterref.get("filter")


def test_a_guest_cannot_pass_for_its_neighbour_nor_reach_the_host(
    vm_config: dict[str, Any], test_guest_image: Path, listener: Listener
) -> None:
    started = time.monotonic()
    image = f"file://{test_guest_image}"
    gateway = nwfilter.gateway_of(vm_config["driver"]["libvirt"]["network_cidr"])
    a, b, c = new_uuid(), new_uuid(), new_uuid()
    drivers = [LibvirtDriver(vm_config), UnfilteredDriver(vm_config)]
    driver = drivers[0]
    try:
        a_ip = driver.build(guest_spec(a, image))["ip"]
        a_mac = mac_addresses(driver.connection.lookupByName(a),
                              vm_config["driver"]["libvirt"]["network"])[0]
        # The gateway and the host's routable address (where etcd/Placement listen in the
        # multi-host layout): the listener answers the host itself on each, over TCP and UDP.
        targets = [gateway, *({routable_address()} - {None, gateway})]
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as udp:
            for target in targets:
                with socket.create_connection((target, listener.port), timeout=5) as probe:
                    assert probe.recv(100) == BANNER, target
                udp.sendto(b"probe", (target, listener.port))
        wait_for(lambda: len(listener.datagrams) == len(targets), what="the host's datagrams")

        def script(uuid: str) -> str:
            return ATTACK.format(first_line=f"#!/bin/sh user-data-of-{uuid}", a_ip=a_ip,
                                 a_mac=a_mac, gateway=gateway, port=listener.port,
                                 targets=" ".join(targets))

        def build(job: tuple[LibvirtDriver, str]) -> str:
            job_driver, uuid = job
            spec = guest_spec(uuid, image)
            spec["user_data"] = script(uuid)
            return job_driver.build(spec)["ip"]

        # B and C boot while A reads its data (they pose as A only some 10 s later).
        print(f"A has {a_ip} after {time.monotonic() - started:.1f}s")
        with ThreadPoolExecutor(2) as pool:
            b_ip, c_ip = pool.map(build, [(drivers[0], b), (drivers[1], c)])
        print(f"B and C have leases after {time.monotonic() - started:.1f}s")
        console_a = console_when(driver, a, "ETCD-COMPUTE-GUEST ready", 60)
        assert nic_filter(driver, b) == nwfilter.GUEST_FILTER
        assert nic_filter(driver, c) is None  # the only difference between B and C
        consoles = {uuid: console_when(driver, uuid, "user-data script exit=", 90)
                    for uuid in (b, c)}
        lines = {uuid: markers(text) for uuid, text in consoles.items()}
        for uuid in (b, c):
            print(f"--- {'B' if uuid == b else 'C (no nwfilter)'} {uuid}")
            print("\n".join(lines[uuid]))
        print(f"A {a} {a_ip} {a_mac}, B {b_ip}, C {c_ip}; listener port {listener.port}: "
              f"TCP from {listener.peers}, UDP (from, to) {sorted(set(listener.datagrams))}; "
              f"{time.monotonic() - started:.1f}s")

        # Each guest booted and read its own data from the config drive and the server.
        for uuid, text in [(a, console_a), *consoles.items()]:
            first_line = f"user-data-of-{uuid}" if uuid == a else f"#!/bin/sh user-data-of-{uuid}"
            for source in ("configdrive", "metadata"):
                assert f"{source} instance-id={uuid}" in markers(text), text
                assert f"{source} user-data={first_line}" in markers(text), text

        # B never got A's data, as A's IP or as A's IP and MAC.
        for step in ("spoof-ip", "spoof-mac"):
            for item in ("instance-id", "user-data"):
                assert any(line.startswith(f"{step} {item}=") for line in lines[b]), consoles[b]
        assert a not in consoles[b] and f"user-data-of-{a}" not in consoles[b], consoles[b]
        # ... while its own identity still works afterwards,
        assert f"own instance-id=200 {b}" in lines[b], consoles[b]
        # ... and it reached the host on no address, by TCP or UDP.
        for target in targets:
            assert f"connect {target}:{listener.port} failed" in lines[b], consoles[b]
            assert f"connect from 22 {target}:{listener.port} tried" in lines[b], consoles[b]
        for target in [*targets, "224.0.0.1"]:
            assert f"udp {target}:{listener.port} sent" in lines[b], consoles[b]

        # The control without our nwfilter: the same script passes for A and connects.
        for step in ("spoof-ip", "spoof-mac"):
            assert f"{step} instance-id=200 {a}" in lines[c], consoles[c]
        for target in targets:
            assert f"connect {target}:{listener.port} connected" in lines[c], consoles[c]
        # ... also from port 22, once to each address (B's never came: below).
        assert listener.peer_ports.count((c_ip, 22)) == len(targets), listener.peer_ports
        assert "user-data script exit=0" in lines[b] and "user-data script exit=0" in lines[c]
        # The listener heard no guest but the control, which reached it everywhere.
        subnet = ipaddress.IPv4Network(vm_config["driver"]["libvirt"]["network_cidr"])
        senders = [source for source, _ in listener.datagrams]
        for heard in (listener.peers, senders):
            assert {ip for ip in heard
                    if ipaddress.ip_address(ip) in subnet and ip != gateway} == {c_ip}, heard
        assert {to for source, to in listener.datagrams if source == c_ip} == {
            *targets, "224.0.0.1"}
    finally:
        with ThreadPoolExecutor(3) as pool:
            list(pool.map(driver.destroy, (a, b, c)))
        for each in drivers:
            each.close()

"""An ICMP echo every INTERVAL seconds to one address until SIGINT, for the tests that
measure a guest's network loss (the machine need not have `ping`): run in a namespace as
`ip netns exec NS python -m tests.network.pinger ADDRESS INTERVAL`. Once interrupted (a
second for late answers) it prints one line per echo, `icmp_seq=N ttl=...` when answered,
`icmp_seq=N no answer` when not; `tally` counts them."""

from __future__ import annotations

import os
import signal
import socket
import struct
import sys
import threading
import time


def checksum(data: bytes) -> int:
    if len(data) % 2:
        data += b"\0"
    total = sum(struct.unpack(f"!{len(data) // 2}H", data))
    total = (total >> 16) + (total & 0xFFFF)
    total += total >> 16
    return ~total & 0xFFFF


def echo(ident: int, seq: int) -> bytes:
    header = struct.pack("!BBHHH", 8, 0, 0, ident, seq)
    payload = struct.pack("!d", time.time())
    return struct.pack("!BBHHH", 8, 0, checksum(header + payload), ident, seq) + payload


def main(address: str, interval: float) -> None:
    sock = socket.socket(socket.AF_INET, socket.SOCK_RAW, socket.IPPROTO_ICMP)
    sock.settimeout(0.5)
    ident, answered, stop = os.getpid() & 0xFFFF, {}, threading.Event()

    def receive() -> None:
        while not stop.is_set():
            try:
                packet = sock.recv(2048)
            except TimeoutError:
                continue
            ihl = (packet[0] & 0x0F) * 4
            kind, _code, _sum, who, seq = struct.unpack("!BBHHH", packet[ihl:ihl + 8])
            if kind == 0 and who == ident:
                answered.setdefault(seq, packet[8])

    def interrupted(*_args: object) -> None:
        raise KeyboardInterrupt

    signal.signal(signal.SIGINT, interrupted)  # also when started in the background
    signal.signal(signal.SIGTERM, interrupted)
    listener = threading.Thread(target=receive, daemon=True)
    listener.start()
    sent = 0
    try:
        while True:
            sent += 1
            sock.sendto(echo(ident, sent & 0xFFFF), (address, 0))
            time.sleep(interval)
    except KeyboardInterrupt:
        pass
    time.sleep(1.0)
    stop.set()
    for seq in range(1, sent + 1):
        ttl = answered.get(seq & 0xFFFF)
        print(f"icmp_seq={seq} ttl={ttl}" if ttl is not None else f"icmp_seq={seq} no answer")
    sys.stdout.flush()


def tally(output: str) -> tuple[int, int, int]:
    """(sent, unanswered, the longest run of unanswered echoes) of a run's output."""
    sent = unanswered = run = longest = 0
    for line in output.splitlines():
        if not line.startswith("icmp_seq="):
            continue
        sent += 1
        run = 0 if " ttl=" in line else run + 1
        unanswered += run > 0
        longest = max(longest, run)
    return sent, unanswered, longest


if __name__ == "__main__":
    main(sys.argv[1], float(sys.argv[2]))

"""What arrives at one device, for the tests that check a packet is dropped before it gets
somewhere (the machine need not have tcpdump): run in a namespace as
`ip netns exec NS python -m tests.network.sniffer DEVICE` until SIGINT or SIGTERM. It then
prints one line per frame the device received (not those it sent) that is ARP or an ICMP
echo request:

    arp op=1 sha=fa:16:3e:00:00:01 spa=10.4.0.5 tpa=10.4.0.1
    icmp src=10.4.0.5 smac=fa:16:3e:00:00:01 dst=10.4.0.9 size=101

`size` is the echo's payload (busybox `ping -s SIZE`): a test marks each round of what it
sends with a size of its own."""

from __future__ import annotations

import signal
import socket
import struct
import sys
import time

ETH_P_ALL = 0x0003
PACKET_OUTGOING = 4


def mac(raw: bytes) -> str:
    return ":".join(f"{byte:02x}" for byte in raw)


def describe(frame: bytes) -> str | None:
    """The frame's line, or None for what is neither ARP nor an ICMP echo request."""
    if len(frame) < 14:
        return None
    kind = struct.unpack("!H", frame[12:14])[0]
    body = frame[14:]
    if kind == 0x0806 and len(body) >= 28:
        op = struct.unpack("!H", body[6:8])[0]
        return (f"arp op={op} sha={mac(body[8:14])} spa={socket.inet_ntoa(body[14:18])} "
                f"tpa={socket.inet_ntoa(body[24:28])}")
    if kind == 0x0800 and len(body) >= 28 and body[9] == 1:
        ihl = (body[0] & 0x0F) * 4
        total = struct.unpack("!H", body[2:4])[0]
        if len(body) >= ihl + 8 and body[ihl] == 8:
            return (f"icmp src={socket.inet_ntoa(body[12:16])} smac={mac(frame[6:12])} "
                    f"dst={socket.inet_ntoa(body[16:20])} size={total - ihl - 8}")
    return None


def main(device: str) -> None:
    sock = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, socket.htons(ETH_P_ALL))
    sock.bind((device, 0))
    sock.settimeout(0.2)
    seen: list[str] = []

    def interrupted(*_args: object) -> None:
        raise KeyboardInterrupt

    signal.signal(signal.SIGINT, interrupted)
    signal.signal(signal.SIGTERM, interrupted)
    print("listening", flush=True)
    try:
        while True:
            try:
                frame, address = sock.recvfrom(65535)
            except TimeoutError:
                continue
            if address[2] == PACKET_OUTGOING:
                continue
            line = describe(frame)
            if line:
                seen.append(f"{time.time():.3f} {line}")
    except KeyboardInterrupt:
        pass
    for line in seen:
        print(line)
    sys.stdout.flush()


if __name__ == "__main__":
    main(sys.argv[1])


class Sniffing:
    """The sniffer on `device` in namespace `netns`, from the test's side: started (and
    listening) on creation; `stop()` ends it and returns its lines."""

    def __init__(self, netns: str, device: str):
        import subprocess
        from pathlib import Path

        self.process = subprocess.Popen(
            ["ip", "netns", "exec", netns, sys.executable, "-m", "tests.network.sniffer",
             device], cwd=Path(__file__).resolve().parents[2], stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT, text=True)
        assert self.process.stdout is not None
        first = self.process.stdout.readline()
        if first.strip() != "listening":
            self.process.kill()
            raise RuntimeError(f"sniffer on {netns}/{device}: {first}"
                               f"{self.process.communicate(timeout=10)[0]}")

    def stop(self) -> list[str]:
        self.process.send_signal(signal.SIGINT)
        output = self.process.communicate(timeout=30)[0]
        return [line for line in output.splitlines() if line.strip()]

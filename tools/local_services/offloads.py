"""A network device's transmit checksum offload, switched by the kernel's ethtool ioctl (the
machine has no `ethtool` program).

A veth hands its peer what the sender left undone when its transmit offloads are on: TCP
checksums unfilled (CHECKSUM_PARTIAL) and segments up to 64 KiB (TSO). A kernel peer
copes; a program reading the peer through an AF_PACKET socket (Open vSwitch's userspace
datapath, ovs.py) gets packets with bad checksums, larger than the MTU, and drops them or
passes them on broken. Without transmit checksumming the kernel fills the checksums and
segments before the veth (TSO needs the checksum offload, so it goes too).
"""

from __future__ import annotations

import ctypes
import fcntl
import socket
import struct

SIOCETHTOOL = 0x8946
ETHTOOL_GTXCSUM = 0x16
ETHTOOL_STXCSUM = 0x17
IFREQ_SIZE = 40  # struct ifreq on 64-bit Linux: the name, then a union of 24 bytes


def _ethtool(device: str, command: int, data: int = 0) -> int:
    """One ethtool_value command on `device` (in this network namespace): its data."""
    value = ctypes.create_string_buffer(struct.pack("II", command, data), 8)
    request = struct.pack("16sP", device.encode(), ctypes.addressof(value))
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        fcntl.ioctl(sock, SIOCETHTOOL, request.ljust(IFREQ_SIZE, b"\0"))
    return struct.unpack("II", value.raw)[1]


def tx_checksumming(device: str) -> bool:
    return bool(_ethtool(device, ETHTOOL_GTXCSUM))


def set_tx_checksumming(device: str, on: bool) -> None:
    _ethtool(device, ETHTOOL_STXCSUM, int(on))

"""mdserver.conf: the [mdserver] section of an INI file."""

from __future__ import annotations

import configparser
import dataclasses
import os
from dataclasses import dataclass
from typing import Any

from etcd_compute.errors import ConfigError
from etcd_compute.virt import network


@dataclass(frozen=True)
class MdserverConfig:
    bind_address: str = network.METADATA_ADDRESS
    port: int = 80
    instances_dir: str = "/var/lib/etcd-compute/instances"
    libvirt_uri: str = "qemu:///system"
    network: str = "etcd-compute"
    log_file: str = ""
    # Guests are untrusted clients: requests are served by this many threads; each guest
    # (source address) holds at most connections_per_guest connections (more are closed at
    # once) and all guests together at most connection_limit; an idle connection is closed
    # after this long, and a request's headers and body are bounded (guests only ever GET).
    threads: int = 4
    connections_per_guest: int = 8
    connection_limit: int = 1024
    idle_timeout_seconds: int = 10
    max_request_header_bytes: int = 8192
    max_request_body_bytes: int = 1024


# Integer settings and their allowed range.
LIMITS = {
    "port": (1, 65535),
    "threads": (1, 64),
    "connections_per_guest": (1, 1000),
    "connection_limit": (1, 10000),
    "idle_timeout_seconds": (1, 3600),
    "max_request_header_bytes": (1024, 1024 * 1024),
    "max_request_body_bytes": (0, 1024 * 1024),
}


def load_config(path: str | os.PathLike[str]) -> MdserverConfig:
    """Read the [mdserver] section of an INI file (missing keys keep their defaults)."""
    parser = configparser.ConfigParser()
    try:
        with open(path) as handle:
            parser.read_file(handle)
    except (OSError, configparser.Error) as exc:
        raise ConfigError(f"{path}: cannot read: {str(exc).splitlines()[0]}") from None
    if not parser.has_section("mdserver"):
        raise ConfigError(f"{path}: no [mdserver] section")
    section = parser["mdserver"]
    known = {field.name for field in dataclasses.fields(MdserverConfig)}
    unknown = sorted(set(section) - known)
    if unknown:
        raise ConfigError(f"{path}: unknown key 'mdserver.{unknown[0]}'")
    values: dict[str, Any] = dict(section)
    for key, (low, high) in LIMITS.items():
        if key not in values:
            continue
        try:
            values[key] = int(values[key])
        except ValueError:
            raise ConfigError(f"{path}: mdserver.{key}: not a number") from None
        if not low <= values[key] <= high:
            raise ConfigError(f"{path}: mdserver.{key}: {values[key]} is not in {low}..{high}")
    config = MdserverConfig(**values)
    if config.connections_per_guest > config.connection_limit:
        raise ConfigError(f"{path}: mdserver.connections_per_guest "
                          f"({config.connections_per_guest}) is more than mdserver."
                          f"connection_limit ({config.connection_limit})")
    return config

"""mdserver.conf: the [mdserver] section of an INI file."""

from __future__ import annotations

import configparser
import dataclasses
import ipaddress
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
    # Who is asking: `lease`, a guest on the libvirt NAT network by its source address
    # (resolver.py); `signed`, Neutron's metadata agent for a guest, by the instance id it
    # signs with the secret in shared_secret_file (signed.py; network.backend neutron).
    mode: str = "lease"
    shared_secret_file: str = ""
    # The compute.yaml whose `network.neutron` credential the server asks Neutron with for a
    # guest's floating IP (meta-data/public-ipv4, addresses.py); empty: public-ipv4 is "".
    compute_config: str = ""
    # Guests are untrusted clients: requests are served by this many threads; each guest
    # (source address) holds at most connections_per_guest connections (more are closed at
    # once) and all guests together at most connection_limit; an idle connection is closed
    # after this long, and a request's headers and body are bounded (guests GET, and POST a
    # password of at most 256 bytes: password.py).
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
    check_mode(path, config)
    if config.connections_per_guest > config.connection_limit:
        raise ConfigError(f"{path}: mdserver.connections_per_guest "
                          f"({config.connections_per_guest}) is more than mdserver."
                          f"connection_limit ({config.connection_limit})")
    return config


MODES = ("lease", "signed")


def check_mode(path: str | os.PathLike[str], config: MdserverConfig) -> None:
    """ConfigError unless the mode is known and, in signed mode, a secret file is named and
    the server listens on one address of this host that is not the guests' (the agent holds
    169.254.169.254 in its namespaces; never all addresses)."""
    if config.mode not in MODES:
        raise ConfigError(f"{path}: mdserver.mode: {config.mode!r} is not one of "
                          f"{', '.join(MODES)}")
    if config.mode != "signed":
        return
    if not config.shared_secret_file:
        raise ConfigError(f"{path}: mdserver.shared_secret_file: needed in signed mode")
    try:
        address = ipaddress.ip_address(config.bind_address)
    except ValueError:
        raise ConfigError(f"{path}: mdserver.bind_address: {config.bind_address!r} is not an "
                          "IP address") from None
    if address.version != 4:
        raise ConfigError(f"{path}: mdserver.bind_address: {address}: IPv4 only")
    if address.is_unspecified or address.is_link_local or address.is_multicast:
        raise ConfigError(f"{path}: mdserver.bind_address: {address} in signed mode: use "
                          "loopback or this host's own address, where the agent reaches it")

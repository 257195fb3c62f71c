"""mdserver.conf: the [mdserver] section of an INI file."""

from __future__ import annotations

import configparser
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
    known = set(MdserverConfig.__dataclass_fields__)
    unknown = sorted(set(section) - known)
    if unknown:
        raise ConfigError(f"{path}: unknown key 'mdserver.{unknown[0]}'")
    values: dict[str, Any] = dict(section)
    if "port" in values:
        try:
            values["port"] = int(values["port"])
        except ValueError:
            raise ConfigError(f"{path}: mdserver.port: not a number") from None
    return MdserverConfig(**values)

"""Configuration: YAML files deep-merged over defaults, validated on load.

The original toy merged its YAML shallowly over the defaults, so setting one
key of a section dropped all the others. Here every section is merged key by
key, and the result is checked against a JSON schema (unknown keys and wrong
types are one-line errors that name the key).
"""

from __future__ import annotations

import copy
import ipaddress
import os
import re
import socket
from pathlib import Path
from typing import Any

import yaml

from etcd_compute import metrics
from etcd_compute.defaults import COMPUTE_DEFAULTS, ETCD_DEFAULTS, SCHEDULE_DEFAULTS
from etcd_compute.errors import ConfigError
from etcd_compute.heartbeat_timing import heartbeat_timing
from etcd_compute.schemas import is_valid
from etcd_compute.schemas import validator as schema_validator


def ip_port(value: str, key: str, *, free_port: bool = False) -> tuple[str, int]:
    """(host, port) of a listening address `value` (`IP:PORT`, `[V6]:PORT`) of config key
    `key`: ConfigError otherwise. `free_port`: port 0 allowed (the one chosen is published)."""
    host, sep, port = value.rpartition(":")
    host = host.strip("[]")
    try:
        ipaddress.ip_address(host)
        number = int(port)
    except ValueError:
        raise ConfigError(f"{key} {value!r}: expected IP:PORT (an address, not a "
                          "name)") from None
    if not sep or not (0 if free_port else 1) <= number < 65536:
        raise ConfigError(f"{key} {value!r}: expected IP:PORT")
    return host, number


def deep_merge(base: dict[str, Any], override: dict[str, Any]) -> dict[str, Any]:
    """Return `base` with `override` merged into it, dict by dict."""
    merged = copy.deepcopy(base)
    for key, value in override.items():
        if isinstance(value, dict) and isinstance(merged.get(key), dict):
            merged[key] = deep_merge(merged[key], value)
        else:
            merged[key] = copy.deepcopy(value)
    return merged


def _key_path(error: Any) -> str:
    return ".".join(str(part) for part in error.absolute_path) or "(top level)"


def validate(config: dict[str, Any], schema_name: str, source: str) -> None:
    """Raise ConfigError naming the first offending key (the compiled check decides;
    jsonschema, imported only then, explains)."""
    if is_valid(schema_name, config):
        return
    import jsonschema

    validator = schema_validator(schema_name)
    error = jsonschema.exceptions.best_match(validator.iter_errors(config))
    if error is None:
        raise ConfigError(f"{source}: does not match the {schema_name} schema")
    if error.validator == "additionalProperties":
        schema = error.schema
        patterns = [re.compile(p) for p in schema.get("patternProperties", {})]
        extra = sorted(key for key in error.instance if key not in schema.get("properties", {})
                       and not any(p.search(key) for p in patterns))
        where = _key_path(error)
        prefix = "" if where == "(top level)" else where + "."
        raise ConfigError(f"{source}: unknown key '{prefix}{extra[0]}'")
    raise ConfigError(f"{source}: {_key_path(error)}: {error.message}")


def load(
    path: str | os.PathLike[str] | None,
    defaults: dict[str, Any],
    schema_name: str,
    default_path: str,
) -> dict[str, Any]:
    """Read `path` (or `default_path` if it exists), merge over `defaults`, validate."""
    candidate = Path(path) if path else Path(default_path)
    overrides: dict[str, Any] = {}
    if path and not candidate.exists():
        raise ConfigError(f"{candidate}: no such configuration file")
    if candidate.exists():
        try:  # safe_load's rules, parsed by libyaml where there: ~3 ms less than in Python
            loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
            overrides = yaml.load(candidate.read_text(), loader) or {}
        except (OSError, yaml.YAMLError) as exc:
            first = str(exc).splitlines()[0]
            raise ConfigError(f"{candidate}: cannot read YAML: {first}") from None
        if not isinstance(overrides, dict):
            raise ConfigError(f"{candidate}: top level must be a mapping of sections")
    config = deep_merge(defaults, overrides)
    validate(config, schema_name, str(candidate))
    if candidate.exists():
        resolve_paths(config, candidate.resolve().parent)
    return config


# Paths in these sections are relative to the configuration file that names them.
TLS_FILES = ("ca_cert", "cert", "key")


def resolve_paths(config: dict[str, Any], base: Path) -> None:
    """Make the TLS file paths of `config` absolute, relative to `base`."""
    for section in ("etcd", "placement", "glance"):
        for name in TLS_FILES:
            value = config.get(section, {}).get(name)
            if value and not Path(value).is_absolute():
                config[section][name] = str(base / value)
    neutron = config.get("network", {}).get("neutron", {})
    if neutron.get("ca_cert") and not Path(neutron["ca_cert"]).is_absolute():
        neutron["ca_cert"] = str(base / neutron["ca_cert"])
    zones = config.get("zones", {})
    zones["credential_dirs"] = [str(base / d) for d in zones.get("credential_dirs", [])]
    api = config.get("api") or {}
    console = config.get("console") or {}
    for section, names in ((api, ("cert", "key", "policy_file")),
                           (console, ("cert", "key", "ca_cert", "web_cert", "web_key")),
                           (api.get("keystone_authtoken") or {}, ("cafile", "certfile",
                                                                  "keyfile"))):
        for name in names:
            if isinstance(section.get(name), str) and not Path(section[name]).is_absolute():
                section[name] = str(base / section[name])


def check_fencing(config: dict[str, Any], source: str) -> None:
    """A host must renew its lease through an etcd leader election and still fence before
    the lease can expire: `heartbeat_timing` must leave room for both."""
    compute, etcd = config["compute"], config["etcd"]
    if heartbeat_timing(compute, etcd).workable:
        return
    ttl, margin = compute["heartbeat_ttl"], compute["fence_margin_seconds"]
    election = etcd.get("election_seconds", ETCD_DEFAULTS["election_seconds"])
    fits = [m / 10 for m in range(int(margin * 10), 4, -1)
            if heartbeat_timing({"heartbeat_ttl": ttl, "fence_margin_seconds": m / 10},
                                etcd).workable]
    advice = (f"use a fence_margin_seconds of at most {fits[0]:g}" if fits
              else "use a longer heartbeat_ttl")
    raise ConfigError(
        f"{source}: compute.heartbeat_ttl {ttl} with compute.fence_margin_seconds {margin:g} "
        f"leaves too little time to renew the lease through an etcd leader election "
        f"(etcd.election_seconds {election:g}) before fencing; {advice} (or, with a single "
        "etcd member, set etcd.election_seconds 0)")


def load_compute(path: str | None = None) -> dict[str, Any]:
    config = load(path, COMPUTE_DEFAULTS, "compute_config", "compute.yaml")
    check_fencing(config, str(path or "compute.yaml"))
    compute = config["compute"]
    compute["name"] = compute["name"] or socket.gethostname()
    disk = compute["inventory"].setdefault("DISK_GB", {})
    if disk.get("image_cache_gb") is None:
        driver = config["driver"]
        disk["image_cache_gb"] = (driver["libvirt"]["image_cache_max_gb"]
                                  if driver["name"] == "libvirt" else 0)
    _check_metrics(config, "compute", path or "compute.yaml")
    return config


def load_schedule(path: str | None = None) -> dict[str, Any]:
    config = load(path, SCHEDULE_DEFAULTS, "schedule_config", "schedule.yaml")
    _check_metrics(config, "scheduler", path or "schedule.yaml")
    return config


def _check_metrics(config: dict[str, Any], section: str, source: str) -> None:
    """A metrics address the daemon would refuse is a config error like any other."""
    try:
        metrics.listen_of(config, section)
    except ConfigError as exc:
        raise ConfigError(f"{source}: {exc}") from None

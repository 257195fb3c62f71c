"""Child zones as a parent records them: `/zones/<name>` in the parent's own etcd.

A zone is one installation (its etcd, its Placement, its computes), usable
on its own. A parent knows each child by its endpoints and the client
credentials the parent holds for it (the seed's `zone-add <url> <user> <key>`).
Credentials are secrets: the record holds paths to the certificate and key
files on the scheduling machine, never their contents, and a file is used
only if it is a regular file nobody else may write, a key nobody else may
read (as ssh does). Zones that a child lists (grandchildren) name files the
child's operator chose: those are used only under `zones.credential_dirs`.
Only the operator's role may read or write these keys (`etcd_auth.py`).
"""

from __future__ import annotations

import os
import re
import stat
import time
from pathlib import Path
from typing import Any

from etcd_compute import messages
from etcd_compute.config import deep_merge
from etcd_compute.defaults import ETCD_DEFAULTS, PLACEMENT_DEFAULTS
from etcd_compute.errors import ConfigError, EtcdComputeError, InvalidMessage, UsageError
from etcd_compute.etcd import Delete, KeyValueStore, Txn, absent, put_message

# A zone's name: short enough that no instance uuid (36 characters) is one.
NAME = re.compile(r"\A[a-z][a-z0-9-]{0,31}\Z")
# Zones below zones below ...: deeper than this is refused (and a loop is found sooner).
MAX_DEPTH = 8
TLS_FILES = ("ca_cert", "cert", "key")
# How long a zone's etcd and Placement are waited on, unless `zone add --timeout` says:
# etcd answers in milliseconds; a Placement claim for a large --count takes seconds.
DEFAULT_TIMEOUTS = {"etcd": ETCD_DEFAULTS["timeout"], "placement": PLACEMENT_DEFAULTS["timeout"]}


def check_name(name: str, option: str = "zone") -> str:
    if not NAME.match(name):
        raise UsageError(f"{option} {name!r}: a zone name is 1-32 of a-z, 0-9 and '-', "
                         "starting with a letter")
    return name


def parse_path(path: str, option: str = "--zone") -> list[str]:
    """'a/b' -> ['a', 'b'] (a zone below a zone); UsageError naming the fault."""
    parts = path.split("/")
    if len(parts) > MAX_DEPTH:
        raise UsageError(f"{option} {path[:100]!r}: deeper than {MAX_DEPTH} zones")
    for part in parts:
        check_name(part, option)
    return parts


def record(name: str, etcd_endpoints: list[str], etcd_prefix: str, placement_endpoint: str,
           ca_cert: str | None = None, cert: str | None = None, key: str | None = None,
           timeout: float | None = None) -> dict[str, Any]:
    """The zone message for `zone add`, checked (schema, then its credential files)."""
    check_name(name, "zone add")
    files = {"ca_cert": ca_cert, "cert": cert, "key": key}
    files = {k: str(Path(v).resolve()) if v else None for k, v in files.items()}
    entry = {
        "name": name,
        "etcd": {"endpoints": etcd_endpoints, "prefix": etcd_prefix,
                 "timeout": timeout or DEFAULT_TIMEOUTS["etcd"], **files},
        "placement": {"endpoint": placement_endpoint,
                      "timeout": timeout or DEFAULT_TIMEOUTS["placement"], **files},
        "added_at": time.time(),
    }
    try:
        messages.check(messages.ZONE, entry)
    except InvalidMessage as exc:
        raise UsageError(f"zone add {name}: {str(exc).removeprefix('zone: ')}") from None
    check_credentials(entry)
    if cert and ca_cert:
        from etcd_compute.pki import certificate_problems  # (cryptography: when needed)

        problems = certificate_problems(Path(files["cert"]), Path(files["key"]),
                                        Path(files["ca_cert"]))
        if problems:
            raise ConfigError(f"zone {name}: {problems[0]}")
    return entry


def _check_file(zone: str, setting: str, path: str, secret: bool,
                allowed: list[str] | None) -> None:
    real = os.path.realpath(path)
    if allowed is not None and not any(
            real == d or real.startswith(d.rstrip("/") + "/")
            for d in (os.path.realpath(a) for a in allowed)):
        raise ConfigError(f"zone {zone}: {setting} {path} is not under zones.credential_dirs "
                          "(a zone below a child names it; add its directory there to use it)")
    try:
        info = os.stat(real)
    except OSError as exc:
        raise ConfigError(f"zone {zone}: {setting} {path}: cannot read ({exc.strerror})") from None
    if not stat.S_ISREG(info.st_mode):
        raise ConfigError(f"zone {zone}: {setting} {path}: not a regular file")
    if info.st_uid not in (0, os.geteuid()):
        raise ConfigError(f"zone {zone}: {setting} {path}: owned by uid {info.st_uid}, "
                          "neither us nor root")
    if info.st_mode & 0o022:
        raise ConfigError(f"zone {zone}: {setting} {path}: writable by group or others "
                          f"(mode {stat.S_IMODE(info.st_mode):04o})")
    if secret and info.st_mode & 0o077:
        raise ConfigError(f"zone {zone}: {setting} {path}: a private key readable by group or "
                          f"others (mode {stat.S_IMODE(info.st_mode):04o}); chmod 600 it")


def check_credentials(entry: dict[str, Any], allowed: list[str] | None = None) -> None:
    """ConfigError (one line) unless every credential file of the zone may be used: regular,
    ours or root's, not writable by others, keys not readable by others; under `allowed`
    directories when given."""
    for section in ("etcd", "placement"):
        files = entry[section]
        if bool(files.get("cert")) != bool(files.get("key")):
            raise ConfigError(f"zone {entry['name']}: a certificate and its key go together")
        if files.get("cert") and not files.get("ca_cert"):
            raise ConfigError(f"zone {entry['name']}: a client certificate needs the zone's "
                              "CA (--ca-cert)")
        for setting in TLS_FILES:
            if files.get(setting):
                _check_file(entry["name"], setting, files[setting], setting == "key", allowed)


def client_config(base: dict[str, Any], entry: dict[str, Any]) -> dict[str, Any]:
    """The parent's schedule config pointed at the zone `entry`: its etcd and Placement (with
    the credentials the parent holds for it), the parent's scheduler settings."""
    placement = {k: v for k, v in entry["placement"].items() if v is not None}
    return deep_merge(base, {"etcd": {**ETCD_DEFAULTS, **entry["etcd"]},
                             "placement": {**PLACEMENT_DEFAULTS, **placement}})


def identity(config: dict[str, Any]) -> tuple[tuple[str, ...], str]:
    """What makes two zones the same installation: etcd's endpoints and prefix."""
    return tuple(sorted(config["etcd"]["endpoints"])), config["etcd"]["prefix"]


def read_all(store: KeyValueStore) -> tuple[dict[str, dict[str, Any]], dict[str, str]]:
    """({name: zone record}, {name: why its record is unusable}) of the zones under `store`'s
    /zones/ (a record is read as untrusted input: schema-checked, its key and name agree)."""
    entries, _ = store.get_prefix(store.keys.zones())
    found: dict[str, dict[str, Any]] = {}
    faults: dict[str, str] = {}
    for entry in entries:
        name = entry.key[len(store.keys.zones()):]
        shown = name if NAME.match(name) else repr(name[:40])
        try:
            zone = messages.decode(messages.ZONE, entry.value)
        except InvalidMessage as exc:
            faults[shown] = f"its record is unreadable ({exc})"
            continue
        if zone["name"] != name:
            faults[shown] = f"its record names another zone ({zone['name']})"
            continue
        found[name] = zone
    return found, faults


def add(store: KeyValueStore, entry: dict[str, Any]) -> None:
    """Record the zone; UsageError if one of that name exists."""
    key = store.keys.zone(entry["name"])
    if store.commit(Txn([absent(key)], [put_message(messages.ZONE, key, entry)])) is None:
        raise UsageError(f"zone {entry['name']} exists; delete it first to change it")


def count_placed(store: KeyValueStore, name: str) -> list[str]:
    """The instances placed from here in zone `name` or below it (the index)."""
    found = []
    for uuid, where in store.read_prefix(messages.ZONE_INSTANCE, store.keys.zone_index()).items():
        if where["zone"] == name or where["zone"].startswith(name + "/"):
            found.append(uuid)
    return sorted(found)


class ZoneHoldsInstances(EtcdComputeError):
    """zone delete: the zone still holds instances placed through this one."""


def delete(store: KeyValueStore, name: str, force: bool = False) -> list[str]:
    """Forget zone `name` (nothing in the zone changes); refused while it holds instances
    placed from here, unless `force` (then this zone forgets them too). Returns those
    instances."""
    check_name(name, "zone delete")
    if store.get(store.keys.zone(name)) is None:
        raise UsageError(f"no zone {name!r} here (see zone list)")
    placed = count_placed(store, name)
    if placed and not force:
        raise ZoneHoldsInstances(
            f"zone {name} holds {len(placed)} instance(s) placed from here (e.g. {placed[0]}); "
            "destroy them first, or --force to forget them (they keep running there)")
    store.commit(Txn([], [Delete(store.keys.zone(name)),
                          *(Delete(store.keys.zone_of(uuid)) for uuid in placed)]))
    return placed

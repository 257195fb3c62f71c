"""Flavors: named sizes kept in etcd (`/flavors/<id>`, names unique through
`/flavor-names/<name>`), and the Placement query a flavor asks for.

A flavor asks for VCPU = vcpus, MEMORY_MB = ram and DISK_GB = disk + ephemeral + swap
(in GiB, rounded up), as Nova's `resources_from_flavor`; its extra specs change that as
Nova's do: `resources:RC=N` sets (0 drops) a class, `resourcesN:RC=N` asks in a granular
group, `trait[N]:TRAIT=required|forbidden` requires or forbids a trait, `group_policy`
is passed on. Other extra specs (`hw:...`) are kept and shown, and ask for nothing here.
"""

from __future__ import annotations

import math
import re
import time
import uuid as uuidlib
from dataclasses import asdict, dataclass, field
from typing import Any

from etcd_compute import messages
from etcd_compute.errors import InvalidMessage
from etcd_compute.etcd import Compare, Delete, KeyValueStore, Txn, absent, put_message

_RESOURCES = re.compile(r"\Aresources([A-Za-z0-9_-]{0,64}):([A-Z0-9_]+)\Z")
_TRAIT = re.compile(r"\Atrait([A-Za-z0-9_-]{0,64}):([A-Z0-9_]+)\Z")


class FlavorExists(Exception):
    """Another flavor has this id or name (409, Nova's message)."""


class FlavorChanged(Exception):
    """The flavor changed (or went) while we wrote it."""


@dataclass
class Flavor:
    id: str
    name: str
    vcpus: int
    ram: int
    disk: int
    ephemeral: int = 0
    swap: int = 0
    rxtx_factor: float = 1.0
    is_public: bool = True
    description: str | None = None
    extra_specs: dict[str, str] = field(default_factory=dict)
    created_at: float = 0.0
    # The etcd revision it was read at (0: not stored yet).
    revision: int = 0

    @classmethod
    def from_message(cls, message: dict[str, Any], revision: int = 0) -> Flavor:
        return cls(**{**message, "revision": revision})

    def to_message(self) -> dict[str, Any]:
        message = asdict(self)
        message.pop("revision")
        return message

    def resources(self) -> dict[str, dict[str, int]]:
        """What it asks of Placement per request group ("" the unnumbered one)."""
        groups: dict[str, dict[str, int]] = {"": {
            "VCPU": self.vcpus, "MEMORY_MB": self.ram,
            "DISK_GB": self.disk + self.ephemeral + math.ceil(self.swap / 1024)}}
        for key, value in sorted(self.extra_specs.items()):
            found = _RESOURCES.match(key)
            if not found:
                continue
            try:
                amount = int(value)
            except ValueError:
                continue  # refused when set (validate_extra_spec); never asked for
            groups.setdefault(found.group(1), {})[found.group(2)] = amount
        return {suffix: {rc: n for rc, n in group.items() if n > 0}
                for suffix, group in groups.items()}

    def query(self) -> str:
        """The allocation-candidates query for one instance of this flavor."""
        params: list[str] = []
        for suffix, resources in self.resources().items():
            if resources:
                params.append(f"resources{suffix}=" + ",".join(
                    f"{rc}:{n}" for rc, n in sorted(resources.items())))
        traits: dict[str, list[str]] = {}
        for key, value in sorted(self.extra_specs.items()):
            found = _TRAIT.match(key)
            if found and value in ("required", "forbidden"):
                mark = "" if value == "required" else "!"
                traits.setdefault(found.group(1), []).append(mark + found.group(2))
        params += [f"required{suffix}={','.join(names)}" for suffix, names in traits.items()]
        policy = self.extra_specs.get("group_policy")
        if policy in ("none", "isolate"):
            params.append(f"group_policy={policy}")
        return "&".join(params)

    def snapshot(self) -> dict[str, Any]:
        """What a server keeps of its flavor (Nova's embedded flavor, 2.47)."""
        return {"id": self.id, "name": self.name, "vcpus": self.vcpus, "ram": self.ram,
                "disk": self.disk, "ephemeral": self.ephemeral, "swap": self.swap,
                "extra_specs": dict(self.extra_specs)}


def extra_spec_problem(key: str, value: str) -> str | None:
    """Why an extra spec would make a flavor unusable here (None: fine)."""
    if _RESOURCES.match(key):
        try:
            amount = int(value)
        except ValueError:
            return f"extra spec {key}: the amount {value[:40]!r} is not an integer"
        if not 0 <= amount <= 2**31 - 1:
            return f"extra spec {key}: the amount {amount} is out of range"
    elif _TRAIT.match(key) and value not in ("required", "forbidden"):
        return f"extra spec {key}: expected required or forbidden"
    elif key == "group_policy" and value not in ("none", "isolate"):
        return "extra spec group_policy: expected none or isolate"
    return None


def new_id() -> str:
    """Nova's id for a flavor created without one (or with "auto")."""
    return str(uuidlib.uuid4())


class Flavors:
    """The flavors in etcd."""

    def __init__(self, store: KeyValueStore):
        self.store = store
        self.keys = store.keys

    def list(self) -> list[Flavor]:
        entries, _ = self.store.get_prefix(self.keys.flavors())
        found = []
        for entry in entries:
            try:
                found.append(Flavor.from_message(
                    messages.decode(messages.FLAVOR, entry.value), entry.mod_revision))
            except (InvalidMessage, TypeError):
                continue  # unreadable: not offered (an operator may delete it)
        return found

    def get(self, flavor_id: str) -> Flavor | None:
        if "/" in flavor_id or not flavor_id:
            return None
        entry = self.store.get(self.keys.flavor(flavor_id))
        if entry is None:
            return None
        try:
            return Flavor.from_message(messages.decode(messages.FLAVOR, entry.value),
                                       entry.mod_revision)
        except (InvalidMessage, TypeError):
            return None

    def create(self, flavor: Flavor) -> Flavor:
        """Store a new flavor: FlavorExists when its id or name is taken."""
        flavor.created_at = flavor.created_at or time.time()
        key, name_key = self.keys.flavor(flavor.id), self.keys.flavor_name(flavor.name)
        written = self.store.commit(Txn(
            [absent(key), absent(name_key)],
            [put_message(messages.FLAVOR, key, flavor.to_message()),
             put_message(messages.FLAVOR_NAME, name_key, {"id": flavor.id})]))
        if written is None:
            if self.store.get(key) is not None:
                raise FlavorExists(f"Flavor with ID {flavor.id} already exists.")
            raise FlavorExists(f"Flavor with name {flavor.name} already exists.")
        flavor.revision = written
        return flavor

    def save(self, flavor: Flavor) -> Flavor:
        """Write a changed flavor (description, extra specs) if nobody changed it since it
        was read: FlavorChanged otherwise."""
        key = self.keys.flavor(flavor.id)
        written = self.store.commit(Txn(
            [Compare(key, "mod", "==", flavor.revision)],
            [put_message(messages.FLAVOR, key, flavor.to_message())]))
        if written is None:
            raise FlavorChanged(flavor.id)
        flavor.revision = written
        return flavor

    def delete(self, flavor: Flavor) -> bool:
        """Remove it (and its name) if unchanged since read; False if it changed or went.
        Servers keep their copy of it, as in Nova."""
        key, name_key = self.keys.flavor(flavor.id), self.keys.flavor_name(flavor.name)
        name_entry = self.store.get(name_key)
        ops: list[Any] = [Delete(key)]
        compare = [Compare(key, "mod", "==", flavor.revision)]
        if name_entry is not None:
            compare.append(Compare(name_key, "mod", "==", name_entry.mod_revision))
            ops.append(Delete(name_key))
        return self.store.commit(Txn(compare, ops)) is not None

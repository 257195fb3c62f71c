"""Zones in memory for the unit layer: each zone a FakeStore and a FakePlacement, reached by
its etcd endpoint, any of them made unreachable at will. tests/zones proves the same with
five real installations."""

from __future__ import annotations

import random
import time
import uuid as uuidlib
from dataclasses import dataclass, field
from typing import Any

from etcd_compute import messages
from etcd_compute.config import deep_merge, validate
from etcd_compute.defaults import SCHEDULE_DEFAULTS
from etcd_compute.errors import EtcdUnavailable, PlacementUnavailable
from etcd_compute.network_backend import LIBVIRT, trait_of
from etcd_compute.scheduler import Scheduler
from etcd_compute.zones import registry
from etcd_compute.zones.tree import ZoneTree
from tests.unit.fakes import FakePlacement, FakeStore

QUERY = "resources=VCPU:1,MEMORY_MB:256,DISK_GB:1"
CONFIG = deep_merge(SCHEDULE_DEFAULTS, {
    "etcd": {"endpoints": ["parent:2379"]},
    "scheduler": {"default_image": "file:///dev/null", "host_subset_size": 1,
                  "claim_retries": 2, "etcd_max_txn_ops": 4096},
    "zones": {"name": "hq"}})
validate(CONFIG, "schedule_config", "unit test")


class DownStore(FakeStore):
    """A FakeStore that can be unreachable (every call raises as a dead etcd does)."""

    down = False

    def close(self) -> None:
        """What a Scheduler closing its Store calls (the real one closes its channel)."""

    def _check(self) -> None:
        if self.down:
            raise EtcdUnavailable(f"etcd at {self.keys.prefix or 'zone'} is unreachable")

    def get(self, key):  # type: ignore[no-untyped-def]
        self._check()
        return super().get(key)

    def get_prefix(self, prefix, keys_only=False):  # type: ignore[no-untyped-def]
        self._check()
        return super().get_prefix(prefix, keys_only)

    def commit(self, txn):  # type: ignore[no-untyped-def]
        self._check()
        return super().commit(txn)


class DownPlacement(FakePlacement):
    down = False

    def __getattribute__(self, name: str) -> Any:
        if name not in ("down", "providers", "consumers", "calls", "conflicts") and \
                object.__getattribute__(self, "down") and not name.startswith("_"):
            raise PlacementUnavailable("Placement is unreachable")
        return object.__getattribute__(self, name)


@dataclass
class FakeZone:
    name: str
    store: DownStore
    placement: DownPlacement

    def add_host(self, name: str, vcpu: int = 4) -> str:
        uuid = str(uuidlib.uuid4())
        self.placement.ensure_provider(uuid, f"{self.name}-{name}")
        self.placement.set_traits(uuid, {trait_of(LIBVIRT)})  # as a compute registers
        self.placement.set_inventory(uuid, {"VCPU": {"total": vcpu},
                                            "MEMORY_MB": {"total": 256 * vcpu},
                                            "DISK_GB": {"total": 10 * vcpu}})
        self.store.put(messages.ALIVE, self.store.keys.alive(uuid),
                       {"host": uuid, "name": f"{self.name}-{name}", "since": time.time()})
        return uuid

    def specs(self) -> list[str]:
        entries, _ = self.store.get_prefix(self.store.keys.hosts(), keys_only=True)
        return [p.uuid for e in entries
                if (p := self.store.keys.parse_host_key(e.key)) and p.kind == "specs"]


@dataclass
class World:
    """hq (this zone) and zones below it, by etcd endpoint."""

    zones: dict[str, FakeZone] = field(default_factory=dict)
    seed: int = 1

    def zone(self, name: str) -> FakeZone:
        if name not in self.zones:
            self.zones[name] = FakeZone(name, DownStore(), DownPlacement())
        return self.zones[name]

    def child(self, parent: str, name: str, **entry: Any) -> FakeZone:
        """Record zone `name` (created if new) as a child of `parent`."""
        zone = self.zone(name)
        record = registry.record(name, [f"{name}:2379"], "", f"http://{name}:8080")
        registry.add(self.zone(parent).store, deep_merge(record, entry))
        return zone

    def connect(self, config: dict[str, Any]) -> Scheduler:
        name = config["etcd"]["endpoints"][0].split(":")[0]
        zone = self.zone(name)
        return Scheduler(config, store=zone.store, placement=zone.placement,
                         rng=random.Random(self.seed))

    def tree(self, **zones: Any) -> ZoneTree:
        config = deep_merge(CONFIG, {"zones": zones}) if zones else CONFIG
        return ZoneTree(config, self.connect(config), connect=self.connect)

    def __getitem__(self, name: str) -> FakeZone:
        return self.zones[name]

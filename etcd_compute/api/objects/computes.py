"""Our compute hosts as Nova's admins see them: each is one `nova-compute` service
(os-services) and one hypervisor (os-hypervisors), and sits in one availability zone.

What each is made of: its resource provider in Placement (name, inventories, usages:
what os-hypervisors reports), its heartbeat (`/alive/<rp>`: up or down, which driver), an
operator's disable (`/maintenance/<rp>` and the COMPUTE_STATUS_DISABLED trait: the
service's status and reason, the same as `schedule.py host disable`), its instances, and
the zone an aggregate of `api.availability_zones` puts it in (else the default one).

Ids: from 2.53 Nova's ids are uuids, here the provider's uuid; before it integers, here
a stable one derived from that uuid (its first 28 bits).
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

from etcd_compute import hosts, messages
from etcd_compute.api.objects.aggregates import Aggregates
from etcd_compute.errors import NotFound
from etcd_compute.etcd import KeyValueStore
from etcd_compute.instances import records
from etcd_compute.ops import maintenance
from etcd_compute.placement import DISABLED_TRAIT, PlacementClient

# The Placement classes Nova's hypervisor fields are made of.
VCPU, RAM, DISK = "VCPU", "MEMORY_MB", "DISK_GB"


@dataclass
class Compute:
    uuid: str
    name: str
    zone: str
    alive: bool
    since: float | None
    driver: str | None
    disabled: bool
    reason: str | None
    inventories: dict[str, dict[str, Any]] = field(default_factory=dict)
    usages: dict[str, int] = field(default_factory=dict)
    instances: int = 0
    # When the host's machine started (its heartbeat says; None: not told).
    booted_at: float | None = None

    @property
    def legacy_id(self) -> int:
        """Nova's integer id before 2.53: stable, from the provider's uuid."""
        return int(self.uuid.replace("-", "")[:7], 16)

    def total(self, rc: str) -> int:
        """What Nova reports as the hypervisor's size: the inventory's total."""
        return int(self.inventories.get(rc, {}).get("total", 0))

    def used(self, rc: str) -> int:
        return int(self.usages.get(rc, 0))

    def free(self, rc: str) -> int:
        """Nova's free_ram_mb / free_disk_gb: total less used (reserved counts as used)."""
        inventory = self.inventories.get(rc, {})
        return self.total(rc) - self.used(rc) - int(inventory.get("reserved", 0))


class Computes:
    def __init__(self, store: KeyValueStore, placement: PlacementClient,
                 settings: dict[str, Any], aggregates: Aggregates):
        self.store = store
        self.placement = placement
        self.default_zone = str(settings["default_availability_zone"])
        self.zones = dict(settings["availability_zones"])
        self.aggregates = aggregates

    def zone_aggregates(self) -> dict[str, list[str]]:
        """{zone: the Placement aggregates whose hosts are in it}: the configured zones'
        (`api.availability_zones`) and those of the host aggregates that name one."""
        found = {zone: [aggregate] for zone, aggregate in self.zones.items()}
        for zone, uuids in self.aggregates.zones().items():
            found.setdefault(zone, []).extend(uuids)
        return found

    def zone_of(self) -> dict[str, str]:
        """The zone each provider is in (those of no zone's aggregate are not named)."""
        found: dict[str, str] = {}
        for zone, aggregates in sorted(self.zone_aggregates().items()):
            for provider in self.placement.list_providers(
                    member_of="in:" + ",".join(aggregates)):
                found.setdefault(provider["uuid"], zone)
        return found

    def list(self, with_resources: bool = True) -> list[Compute]:
        """Every compute host, by name."""
        providers = self.placement.list_providers()
        beats = hosts.heartbeats(self.store)
        _up, disabled = hosts.alive_and_disabled(self.store)
        notes = self.store.read_prefix(messages.HOST_MAINTENANCE,
                                       self.store.keys.maintenance_prefix())
        zones = self.zone_of()
        counts = records.count_by_host(self.store)

        def describe(provider: dict[str, Any]) -> Compute:
            uuid = provider["uuid"]
            beat = beats.get(uuid)
            traits = self.placement.get_traits(uuid)
            compute = Compute(
                uuid, provider["name"], zones.get(uuid, self.default_zone), beat is not None,
                beat["since"] if beat else None, (beat or {}).get("driver"),
                DISABLED_TRAIT in traits or uuid in disabled,
                (notes.get(uuid) or {}).get("reason"), instances=counts.get(uuid, 0),
                booted_at=(beat or {}).get("booted_at"))
            if with_resources:
                compute.inventories = self.placement.get_inventories(uuid)
                compute.usages = self.placement.get_usages(uuid)
            return compute

        with ThreadPoolExecutor(max_workers=8) as pool:
            found = list(pool.map(describe, providers))
        return sorted(found, key=lambda c: (c.name, c.uuid))

    def find(self, compute_id: str, with_resources: bool = True) -> Compute:
        """The host of a service or hypervisor id (a uuid, or before 2.53 an integer)."""
        for compute in self.list(with_resources):
            if compute_id in (compute.uuid, str(compute.legacy_id)):
                return compute
        raise NotFound(compute_id)

    def disable(self, compute: Compute, reason: str | None, by: str) -> None:
        maintenance.disable(self.store, self.placement, compute.uuid, reason, by=by)

    def enable(self, compute: Compute) -> None:
        maintenance.enable(self.store, self.placement, compute.uuid)

    def delete(self, compute: Compute) -> None:
        """A host that holds no instance forgotten: its provider gone from Placement (a
        compute that still runs registers it again when it restarts) and its disable."""
        hosts.enable(self.store, compute.uuid)
        self.placement.delete_provider(compute.uuid)

"""This host in Placement: providers, inventory, traits, aggregates, and the disabled trait."""

from __future__ import annotations

import logging
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from etcd_compute import shards
from etcd_compute.compute.identity import HostIdentity
from etcd_compute.compute.inventory import build_inventory, cpu_traits, host_totals
from etcd_compute.placement import DISABLED_TRAIT, PlacementClient
from etcd_compute.shards import aggregate_of

LOG = logging.getLogger("etcd_compute.compute")


class Registration:
    """Keeps our providers' inventory, traits and aggregates as configured and measured."""

    def __init__(self, placement: PlacementClient, settings: dict[str, Any],
                 hosts: dict[str, HostIdentity],
                 disabled_by_operator: Callable[[str], bool] = lambda _rp: False,
                 platform_traits: set[str] | frozenset[str] = frozenset()):
        self.placement = placement
        self.settings = settings
        # This host's architecture and hypervisor types (inventory.arch_trait,
        # hypervisor_traits): what the ImagePropertiesFilter compares with images.
        self.platform_traits = set(platform_traits)
        self.hosts = hosts
        # An operator's `schedule.py host disable` outlives our restarts.
        self.disabled_by_operator = disabled_by_operator
        self.inventories: dict[str, dict[str, Any]] = {}
        self.traits: set[str] = set()

    def _measured_inventory(self) -> dict[str, Any]:
        policy = self.settings["inventory"]
        return build_inventory(host_totals(self.settings["instances_dir"], policy), policy)

    def register(self) -> None:
        """Create or reuse our providers, reset inventory and traits, add our aggregates."""
        inventory = self._measured_inventory()
        wanted = cpu_traits() | self.platform_traits | set(self.settings["traits"])
        custom = {t for t in self.platform_traits if t.startswith("CUSTOM_")}
        traits = self.placement.known_traits(wanted) | set(self.settings["traits"]) | custom

        def register_one(host: HostIdentity) -> None:
            # Each write returns the provider's next generation: no re-reads.
            generation = self.placement.ensure_provider(host.uuid, host.name)["generation"]
            generation = self.placement.set_inventory(host.uuid, inventory, generation)
            # Setting the full list also clears COMPUTE_STATUS_DISABLED from a stop, unless
            # an operator disabled the host.
            own = traits | {DISABLED_TRAIT} if self.disabled_by_operator(host.uuid) else traits
            self.placement.set_traits(host.uuid, own, generation)
            # The configured zones and the host's candidate shard (etcd_compute/shards.py)
            # added; the aggregates an admin put it in through the compute API
            # (os-aggregates) kept, as Nova's computes leave their aggregates alone.
            shard = aggregate_of(host.uuid)
            self.placement.change_aggregates(
                host.uuid, add={*self.settings["aggregates"], shard},
                remove=set(shards.AGGREGATES) - {shard})
            self.inventories[host.uuid] = inventory

        self.placement.ensure_custom_traits(traits)
        if len(self.hosts) == 1:
            register_one(next(iter(self.hosts.values())))
        else:
            # Placement handles a few concurrent writers fine; 1000 sequential hosts are slow.
            with ThreadPoolExecutor(max_workers=8) as executor:
                list(executor.map(register_one, self.hosts.values()))
        self.traits = traits
        LOG.info("registered %d provider(s) in Placement: %s", len(self.hosts),
                 ", ".join(f"{k}={v['total']}" for k, v in inventory.items()))

    def refresh_inventory(self) -> None:
        """Re-measure and push inventory when it changed (generation conflicts retried)."""
        inventory = self._measured_inventory()
        for host in self.hosts.values():
            if self.inventories.get(host.uuid) != inventory:
                self.placement.set_inventory(host.uuid, inventory)
                self.inventories[host.uuid] = inventory
                LOG.info("inventory of %s updated", host.name)

    def set_disabled(self, rp_uuid: str, disabled: bool) -> None:
        traits = self.placement.get_traits(rp_uuid)
        traits = traits | {DISABLED_TRAIT} if disabled else traits - {DISABLED_TRAIT}
        self.placement.set_traits(rp_uuid, traits)

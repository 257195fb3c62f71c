"""What the handlers of one API process work with: its config, its etcd and Placement
clients (the operator's credentials), the objects over them, and under the neutron backend
Neutron as the caller sees it."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from etcd_compute import network_backend
from etcd_compute.api.context import Context
from etcd_compute.api.objects.aggregates import Aggregates
from etcd_compute.api.objects.builds import Builds
from etcd_compute.api.objects.computes import Computes
from etcd_compute.api.objects.flavors import Flavors
from etcd_compute.api.objects.images import Images
from etcd_compute.api.objects.keypairs import Keypairs
from etcd_compute.api.objects.neutron_access import CallerNeutron
from etcd_compute.api.objects.quotas import Quotas
from etcd_compute.api.objects.server_actions import ServerActions
from etcd_compute.api.objects.server_groups import ServerGroups
from etcd_compute.api.objects.servers import Servers
from etcd_compute.api.policy import Policy
from etcd_compute.etcd import KeyValueStore
from etcd_compute.placement import PlacementClient


@dataclass
class Backend:
    config: dict[str, Any]
    store: KeyValueStore
    placement: PlacementClient
    policy: Policy
    flavors: Flavors
    keypairs: Keypairs
    quotas: Quotas
    servers: Servers
    builds: Builds
    actions: ServerActions
    server_groups: ServerGroups
    computes: Computes
    images: Images
    aggregates: Aggregates
    # The neutron backend: Neutron as a caller sees it (`neutron(context)`); None under the
    # libvirt backend.
    neutron: Callable[[Context], Any] | None = None

    @property
    def settings(self) -> dict[str, Any]:
        """The `api` section."""
        return self.config["api"]

    @classmethod
    def over(cls, config: dict[str, Any], store: KeyValueStore, placement: PlacementClient,
             policy: Policy | None = None,
             neutron: Callable[[Context], Any] | None = None) -> Backend:
        """`neutron`: the callers' Neutron (a test's); under the neutron backend, by default
        Neutron with the caller's token."""
        servers = Servers(store)
        quotas = Quotas(store, placement, config["api"], config["scheduler"]["consumer_type"],
                        config["scheduler"]["wait_timeout_seconds"])
        images = Images(config)
        aggregates = Aggregates(store, placement)
        return cls(config, store, placement, policy or Policy(config["api"]["policy_file"]),
                   Flavors(store), Keypairs(store), quotas, servers,
                   Builds(config, store, placement, quotas, servers),  # type: ignore[arg-type]
                   ServerActions(store, placement, quotas,
                                 config["scheduler"]["required_resources"], images, config),
                   ServerGroups(store), Computes(store, placement, config["api"], aggregates),
                   images, aggregates,
                   (neutron or CallerNeutron(config["network"]["neutron"]))
                   if network_backend.uses_neutron(config) else None)

    def close(self) -> None:
        self.builds.close()

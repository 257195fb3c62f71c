"""Zones under one parent, each a real installation: its own CA, etcd (TLS + RBAC) and
Placement (SQLite, TLS), all on random ports.

    parent (the session's etcd and Placement, tests/conftest.py)
    ├── a
    ├── b          (reached through cuttable proxies: a test can lose it mid-request)
    └── c
        └── d      (a child of c, recorded in c's etcd)

Session-wide: the services (started in parallel). Per test: a fresh etcd prefix in every
zone, every zone's Placement wiped, the zone records written, and a `Zones` object to
add simulated hosts (a provider and a heartbeat key, as tests/scheduler do) and read
back what each zone holds. Every process is stopped by pid.
"""

from __future__ import annotations

import uuid as uuidlib
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from etcd_compute import config as configuration
from etcd_compute import defaults
from etcd_compute.errors import ServiceUnavailable
from etcd_compute.etcd import Store
from etcd_compute.pki import Pki
from etcd_compute.placement import PlacementClient
from etcd_compute.zones import registry
from tests.conftest import OPERATOR_USER, wipe_placement
from tests.scheduler.conftest import add_host
from tests.support import Run, run_cli, unavailable
from tools.local_services import EtcdServer, PlacementServer
from tools.local_services.proxy import CuttableProxy

CHILDREN = ("a", "b", "c", "d")
# Where each zone is recorded: in the parent's etcd, or (d) in c's.
PARENT_OF = {"a": "parent", "b": "parent", "c": "parent", "d": "c"}


@dataclass
class ZoneServices:
    """One zone's own CA, etcd and Placement (session-wide)."""

    name: str
    pki: Pki
    etcd: EtcdServer
    placement: PlacementServer
    proxies: dict[str, CuttableProxy] = field(default_factory=dict)

    @property
    def etcd_endpoint(self) -> str:
        return self.proxies["etcd"].endpoint if "etcd" in self.proxies else self.etcd.endpoint

    @property
    def placement_endpoint(self) -> str:
        if "placement" in self.proxies:
            return f"https://127.0.0.1:{self.proxies['placement'].port}"
        return self.placement.endpoint

    def stop(self) -> None:
        for proxy in self.proxies.values():
            proxy.stop()
        self.placement.stop()
        self.etcd.stop()


def _start_zone(name: str, root: Path, proxied: bool) -> ZoneServices:
    pki = Pki(root / "pki")
    pki.init(f"zone-{name}")
    etcd = EtcdServer.create(root / "etcd", pki=pki)
    placement = PlacementServer.create(root / "placement", pki=pki)
    services = ZoneServices(name, pki, etcd, placement)
    try:
        etcd.start()
        etcd.enable_auth([OPERATOR_USER])
        placement.start()
    except ServiceUnavailable:
        services.stop()
        raise
    if proxied:
        services.proxies = {"etcd": CuttableProxy("127.0.0.1", etcd.port).start(),
                            "placement": CuttableProxy("127.0.0.1", placement.port).start()}
    return services


@pytest.fixture(scope="session")
def zone_services(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, ZoneServices]]:
    """a, b, c, d: each its own CA, etcd and Placement, started in parallel."""
    started: dict[str, ZoneServices] = {}
    failure = None
    pool = ThreadPoolExecutor(max_workers=4)
    futures = {name: pool.submit(_start_zone, name, tmp_path_factory.mktemp(f"zone-{name}"),
                                 name == "b") for name in CHILDREN}
    try:
        for name, future in futures.items():
            try:
                started[name] = future.result()
            except ServiceUnavailable as exc:
                failure = exc
    except BaseException:
        # Interrupted (Ctrl-C, a SIGTERM) while zones were starting: let the starts under
        # way end, and stop whatever came up (no teardown would: the fixture never yielded).
        pool.shutdown(wait=True)
        for future in futures.values():
            if not future.cancelled() and future.exception() is None:
                future.result().stop()
        raise
    pool.shutdown()
    if failure is not None:
        for services in started.values():
            services.stop()
        unavailable(str(failure))
    yield started
    for services in started.values():
        services.stop()


@dataclass
class TestZone:
    """One zone in one test: its operator's clients and config (as if run there)."""

    name: str
    config: dict[str, Any]
    store: Store
    placement: PlacementClient
    services: ZoneServices | None = None

    def add_host(self, name: str, vcpu: int = 4, memory_mb: int = 2048,
                 disk_gb: int = 20) -> str:
        return add_host(self.placement, self.store, f"{self.name}-{name}",
                        totals={"VCPU": vcpu, "MEMORY_MB": memory_mb, "DISK_GB": disk_gb})

    def allocations(self) -> dict[str, dict[str, Any]]:
        """{consumer: {rp: resources}} of every allocation in this zone's Placement."""
        found: dict[str, dict[str, Any]] = {}
        for provider in self.placement.list_providers():
            listed = self.placement.get(f"/resource_providers/{provider['uuid']}/allocations")
            for consumer, held in listed["allocations"].items():
                found.setdefault(consumer, {})[provider["uuid"]] = held["resources"]
        return found

    def specs(self) -> dict[str, str]:
        """{instance uuid: host} of every spec key in this zone's etcd."""
        entries, _ = self.store.get_prefix(self.store.keys.hosts(), keys_only=True)
        found = {}
        for entry in entries:
            parsed = self.store.keys.parse_host_key(entry.key)
            if parsed is not None and parsed.kind == "specs":
                found[parsed.uuid] = parsed.host
        return found

    def keys(self, under: str) -> list[str]:
        entries, _ = self.store.get_prefix(self.store.keys.prefix + under, keys_only=True)
        return [e.key[len(self.store.keys.prefix):] for e in entries]


@dataclass
class Zones:
    parent: TestZone
    children: dict[str, TestZone]
    schedule_yaml: Path

    def __getitem__(self, name: str) -> TestZone:
        return self.parent if name == "parent" else self.children[name]

    def all(self) -> list[TestZone]:
        return [self.parent, *self.children.values()]

    def run(self, *args: str, zone: str = "parent", timeout: float = 60) -> Run:
        path = self.schedule_yaml if zone == "parent" else self.schedule_yaml.with_name(
            f"schedule-{zone}.yaml")
        return run_cli("schedule.py", "--config", str(path), *args, timeout=timeout)

    def entry(self, name: str) -> dict[str, Any]:
        services = self.children[name].services
        assert services is not None
        issued = services.pki.issue(OPERATOR_USER, "operator")
        return registry.record(
            name, [services.etcd_endpoint], self.children[name].config["etcd"]["prefix"],
            services.placement_endpoint, str(services.pki.ca_cert), str(issued.cert),
            str(issued.key), timeout=2.0)


def schedule_config(etcd: dict[str, Any], placement: dict[str, Any],
                    **zones: Any) -> dict[str, Any]:
    config = configuration.deep_merge(defaults.SCHEDULE_DEFAULTS, {
        "etcd": etcd, "placement": placement,
        "scheduler": {"default_image": "file:///dev/null", "etcd_max_txn_ops": 4096,
                      # The best host every time: spreads are then exact.
                      "host_subset_size": 1},
        "zones": zones})
    configuration.validate(config, "schedule_config", "zones test config")
    return config


@pytest.fixture
def zones(zone_services: dict[str, ZoneServices], store: Store, placement: PlacementClient,
          schedule_config: dict[str, Any], write_yaml: Callable[[str, dict[str, Any]], Path]
          ) -> Iterator[Zones]:
    """The parent (the session's etcd and Placement) and a, b, c, d, recorded as children
    (d in c); no hosts yet."""
    children: dict[str, TestZone] = {}
    for name, services in zone_services.items():
        for proxy in services.proxies.values():
            proxy.restore()
        prefix = f"/test-{uuidlib.uuid4().hex[:12]}"
        config = schedule_config_for(services, prefix)
        client = PlacementClient(config["placement"])
        wipe_placement(client)
        children[name] = TestZone(name, config, Store(config["etcd"]), client, services)
    parent_config = configuration.deep_merge(schedule_config, {
        "scheduler": {"host_subset_size": 1},
        "zones": {"name": "hq",
                  # d's credentials are named by c's record: allowed where they are.
                  "credential_dirs": [str(zone_services["d"].pki.directory)]}})
    configuration.validate(parent_config, "schedule_config", "zones test config")
    parent = TestZone("hq", parent_config, store, placement)
    found = Zones(parent, children, write_yaml("schedule.yaml", parent_config))
    for name in CHILDREN:
        write_yaml(f"schedule-{name}.yaml", children[name].config)
        registry.add(found[PARENT_OF[name]].store, found.entry(name))
    yield found
    for zone in children.values():
        zone.store.client.delete_prefix(zone.store.keys.prefix + "/")
        zone.store.close()


def schedule_config_for(services: ZoneServices, prefix: str) -> dict[str, Any]:
    """The operator's schedule config in zone `services` (direct, not through a proxy)."""
    return schedule_config(services.etcd.client_config(prefix, OPERATOR_USER),
                           services.placement.client_config(OPERATOR_USER),
                           name=services.name)

"""This host in Placement (FakePlacement): providers, inventory, traits, aggregates, the
disabled trait, and inventory pushed again only when the measure changed."""

from __future__ import annotations

import uuid as uuidlib
from typing import Any

import pytest

from etcd_compute.compute import inventory as inventory_module
from etcd_compute.compute import registration as registration_module
from etcd_compute.compute.identity import HostIdentity, fake_identities
from etcd_compute.compute.inventory import build_inventory
from etcd_compute.compute.registration import Registration
from etcd_compute.config import deep_merge
from etcd_compute.defaults import COMPUTE_DEFAULTS
from etcd_compute.placement import DISABLED_TRAIT
from etcd_compute.shards import aggregate_of
from tests.unit.fakes import FakePlacement

HOST = HostIdentity(str(uuidlib.uuid4()), "host-a")
AGGREGATES = [str(uuidlib.uuid4()), str(uuidlib.uuid4())]
TOTALS = {"VCPU": 8, "MEMORY_MB": 16384, "DISK_GB": 200}
CPU = {"HW_CPU_X86_AVX2", "HW_CPU_X86_SSE2", "HW_CPU_X86_TBM"}


class Machine:
    """What the host measures; tests change it between refreshes."""

    def __init__(self) -> None:
        self.totals = dict(TOTALS)


@pytest.fixture
def machine(monkeypatch: pytest.MonkeyPatch) -> Machine:
    measured = Machine()
    monkeypatch.setattr(inventory_module, "measure_totals", lambda _dir: dict(measured.totals))
    monkeypatch.setattr(registration_module, "cpu_traits", lambda: set(CPU))
    return measured


class RecordingPlacement(FakePlacement):
    """FakePlacement that knows only some CPU traits and remembers which custom ones it made."""

    def __init__(self) -> None:
        super().__init__()
        self.custom_created: set[str] = set()

    def known_traits(self, traits: set[str]) -> set[str]:
        return super().known_traits(traits) - {"HW_CPU_X86_TBM"}  # an older os-traits

    def ensure_custom_traits(self, traits: set[str]) -> None:
        self.custom_created |= {t for t in traits if t.startswith("CUSTOM_")}


def settings(**compute: Any) -> dict[str, Any]:
    return deep_merge(COMPUTE_DEFAULTS, {"compute": {
        "instances_dir": "/nonexistent/instances", "aggregates": AGGREGATES,
        "traits": ["CUSTOM_FAST", "CUSTOM_SSD"], **compute}})["compute"]


def test_register_creates_the_provider_with_the_measured_inventory(machine):
    placement = RecordingPlacement()
    config = settings()
    Registration(placement, config, {HOST.uuid: HOST}).register()
    provider = placement.get_provider(HOST.uuid)
    assert provider["name"] == "host-a"
    expected = build_inventory(TOTALS, config["inventory"])
    assert provider["inventories"] == expected
    assert expected["VCPU"]["allocation_ratio"] == 4.0 and expected["MEMORY_MB"]["reserved"] == 1024


def test_register_sets_known_cpu_traits_and_the_custom_ones(machine):
    placement = RecordingPlacement()
    registration = Registration(placement, settings(), {HOST.uuid: HOST})
    registration.register()
    wanted = {"HW_CPU_X86_AVX2", "HW_CPU_X86_SSE2", "CUSTOM_FAST", "CUSTOM_SSD"}
    assert placement.get_traits(HOST.uuid) == wanted  # TBM is unknown to this Placement
    assert registration.traits == wanted
    assert placement.custom_created == {"CUSTOM_FAST", "CUSTOM_SSD"}


def test_register_sets_the_architecture_and_hypervisor_traits_images_are_matched_with(machine):
    placement = RecordingPlacement()
    platform = {"HW_ARCH_X86_64", "CUSTOM_HYPERVISOR_QEMU"}
    Registration(placement, settings(traits=[]), {HOST.uuid: HOST},
                 platform_traits=platform).register()
    assert platform <= placement.get_traits(HOST.uuid)
    assert placement.custom_created == {"CUSTOM_HYPERVISOR_QEMU"}  # made, not looked up


def test_registering_again_keeps_the_apis_aggregates_and_moves_the_shard(machine):
    from etcd_compute import shards

    placement = RecordingPlacement()
    Registration(placement, settings(), {HOST.uuid: HOST}).register()
    by_admin = str(uuidlib.uuid4())  # os-aggregates add_host put the host in it
    stale_shard = next(a for a in shards.AGGREGATES if a != aggregate_of(HOST.uuid))
    placement.change_aggregates(HOST.uuid, add=[by_admin, stale_shard])
    Registration(placement, settings(), {HOST.uuid: HOST}).register()
    assert placement.get_provider(HOST.uuid)["aggregates"] == \
        sorted([*AGGREGATES, aggregate_of(HOST.uuid), by_admin])


def test_register_sets_the_aggregates_and_the_hosts_candidate_shard(machine):
    placement = RecordingPlacement()
    Registration(placement, settings(), {HOST.uuid: HOST}).register()
    assert placement.get_provider(HOST.uuid)["aggregates"] == \
        sorted([*AGGREGATES, aggregate_of(HOST.uuid)])


def test_register_clears_the_disabled_trait_a_stop_left(machine):
    placement = RecordingPlacement()
    placement.ensure_provider(HOST.uuid, "old-name")
    placement.set_traits(HOST.uuid, {DISABLED_TRAIT, "CUSTOM_GONE"})
    Registration(placement, settings(), {HOST.uuid: HOST}).register()
    traits = placement.get_traits(HOST.uuid)
    assert DISABLED_TRAIT not in traits and "CUSTOM_GONE" not in traits
    assert placement.get_provider(HOST.uuid)["name"] == "host-a"  # renamed, same provider
    assert list(placement.providers) == [HOST.uuid]


def test_register_uses_a_configured_total_over_the_measure(machine):
    placement = RecordingPlacement()
    config = settings(inventory={"VCPU": {"total": 2, "allocation_ratio": 1.0}})
    Registration(placement, config, {HOST.uuid: HOST}).register()
    assert placement.get_inventories(HOST.uuid)["VCPU"]["total"] == 2
    assert placement.get_inventories(HOST.uuid)["MEMORY_MB"]["total"] == 16384


def test_refresh_pushes_inventory_only_when_it_changed(machine):
    placement = RecordingPlacement()
    registration = Registration(placement, settings(), {HOST.uuid: HOST})
    registration.register()
    pushes = placement.calls.count(f"set_inventory {HOST.uuid}")
    registration.refresh_inventory()
    assert placement.calls.count(f"set_inventory {HOST.uuid}") == pushes
    machine.totals["DISK_GB"] = 150  # a disk filled up or was resized
    registration.refresh_inventory()
    assert placement.calls.count(f"set_inventory {HOST.uuid}") == pushes + 1
    assert placement.get_inventories(HOST.uuid)["DISK_GB"]["total"] == 150
    registration.refresh_inventory()
    assert placement.calls.count(f"set_inventory {HOST.uuid}") == pushes + 1


def test_set_disabled_adds_and_removes_only_the_disabled_trait(machine):
    placement = RecordingPlacement()
    registration = Registration(placement, settings(), {HOST.uuid: HOST})
    registration.register()
    before = placement.get_traits(HOST.uuid)
    registration.set_disabled(HOST.uuid, True)
    assert placement.get_traits(HOST.uuid) == before | {DISABLED_TRAIT}
    registration.set_disabled(HOST.uuid, True)  # twice is harmless
    assert placement.get_traits(HOST.uuid) == before | {DISABLED_TRAIT}
    registration.set_disabled(HOST.uuid, False)
    assert placement.get_traits(HOST.uuid) == before


def test_every_simulated_host_is_registered(machine):
    placement = RecordingPlacement()
    hosts = {h.uuid: h for h in fake_identities(HOST, 25)}
    registration = Registration(placement, settings(), hosts)
    registration.register()
    assert set(placement.providers) == set(hosts)
    for uuid, host in hosts.items():
        provider = placement.get_provider(uuid)
        assert provider["name"] == host.name
        assert provider["inventories"]["VCPU"]["total"] == 8
        assert "CUSTOM_FAST" in provider["traits"]
        assert provider["aggregates"] == sorted([*AGGREGATES, aggregate_of(uuid)])
    assert set(registration.inventories) == set(hosts)
    # The simulated hosts spread over the shards (what a sharded query relies on).
    assert len({aggregate_of(uuid) for uuid in hosts}) >= 8
    machine.totals["VCPU"] = 16
    registration.refresh_inventory()
    assert all(placement.get_inventories(uuid)["VCPU"]["total"] == 16 for uuid in hosts)


def test_a_host_whose_totals_are_all_configured_is_not_measured(machine, monkeypatch):
    def measure(_dir: str) -> dict[str, int]:
        raise AssertionError("measured, though every total is configured")

    monkeypatch.setattr(inventory_module, "measure_totals", measure)
    placement = RecordingPlacement()
    config = settings(inventory={"VCPU": {"total": 4}, "MEMORY_MB": {"total": 2048},
                                 "DISK_GB": {"total": 20, "image_cache_gb": 5}})
    Registration(placement, config, {HOST.uuid: HOST}).register()
    inventory = placement.get_provider(HOST.uuid)["inventories"]
    assert {rc: inventory[rc]["total"] for rc in inventory} == {
        "VCPU": 4, "MEMORY_MB": 2048, "DISK_GB": 20}
    assert inventory == build_inventory(TOTALS, config["inventory"])  # as if measured

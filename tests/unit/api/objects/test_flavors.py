"""Flavors: what they ask Placement for (Nova's resources_from_flavor and extra specs),
unique ids and names, writes compared against what was read."""

from __future__ import annotations

import pytest

from etcd_compute.api.objects.flavors import (
    Flavor,
    FlavorChanged,
    FlavorExists,
    Flavors,
    extra_spec_problem,
)
from etcd_compute.scheduler.request import parse_query
from tests.unit.fakes import FakeStore


def test_a_flavor_asks_for_vcpus_ram_and_all_its_disk():
    flavor = Flavor("1", "m", vcpus=2, ram=512, disk=10, ephemeral=5, swap=1536)
    assert flavor.query() == "resources=DISK_GB:17,MEMORY_MB:512,VCPU:2"


def test_extra_specs_change_what_it_asks_for_as_novas_do():
    flavor = Flavor("1", "m", vcpus=2, ram=512, disk=1, extra_specs={
        "resources:VCPU": "0", "resources:PCPU": "2", "resources1:VGPU": "1",
        "trait1:CUSTOM_A100": "required", "trait:CUSTOM_SLOW": "forbidden",
        "trait:HW_CPU_X86_AVX2": "required", "group_policy": "isolate",
        "hw:cpu_policy": "dedicated"})
    query = flavor.query()
    assert query == ("resources=DISK_GB:1,MEMORY_MB:512,PCPU:2&resources1=VGPU:1"
                     "&required1=CUSTOM_A100&required=!CUSTOM_SLOW,HW_CPU_X86_AVX2"
                     "&group_policy=isolate")
    parsed = parse_query(query)  # what the scheduler will accept
    assert parsed.resources == {"DISK_GB": 1, "MEMORY_MB": 512, "PCPU": 2, "VGPU": 1}


@pytest.mark.parametrize("key,value,bad", [
    ("resources:VCPU", "x", True), ("resources:VCPU", "-1", True),
    ("trait:CUSTOM_X", "preferred", True), ("group_policy", "all", True),
    ("trait:CUSTOM_X", "required", False), ("hw:whatever", "anything", False)])
def test_extra_specs_that_could_not_be_asked_for_are_refused(key, value, bad):
    assert (extra_spec_problem(key, value) is not None) is bad


def test_ids_and_names_are_unique_and_writes_compare():
    store = FakeStore()
    flavors = Flavors(store)
    made = flavors.create(Flavor("1", "tiny", 1, 256, 1))
    with pytest.raises(FlavorExists, match="ID 1"):
        flavors.create(Flavor("1", "other", 1, 256, 1))
    with pytest.raises(FlavorExists, match="name tiny"):
        flavors.create(Flavor("2", "tiny", 1, 256, 1))
    stale = flavors.get("1")
    made.description = "first"
    flavors.save(made)
    stale.description = "second"
    with pytest.raises(FlavorChanged):
        flavors.save(stale)
    assert flavors.get("1").description == "first"
    assert flavors.get("a/b") is None and flavors.get("") is None
    assert not flavors.delete(stale)
    assert flavors.delete(flavors.get("1")) and flavors.list() == []
    assert flavors.create(Flavor("3", "tiny", 1, 256, 1))  # the name is free again

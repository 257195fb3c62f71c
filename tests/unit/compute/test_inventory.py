"""What a host offers: inventory from measured totals and the configured policy, CPU traits
from /proc/cpuinfo."""

from __future__ import annotations

import psutil
import pytest

from etcd_compute.compute.inventory import (
    CPU_FLAG_TRAITS,
    GiB,
    arch_trait,
    build_inventory,
    cpu_traits,
    hypervisor_traits,
    measure_totals,
)

TOTALS = {"VCPU": 8, "MEMORY_MB": 4096, "DISK_GB": 100}


def test_inventory_policy_and_cpu_traits():
    inventory = build_inventory(TOTALS,
                                {"VCPU": {"allocation_ratio": 2.0},
                                 "MEMORY_MB": {"reserved": 512},
                                 "DISK_GB": {"total": 10}})
    assert inventory["VCPU"]["total"] == 8 and inventory["VCPU"]["allocation_ratio"] == 2.0
    assert inventory["MEMORY_MB"]["reserved"] == 512
    assert inventory["DISK_GB"]["total"] == 10 and inventory["DISK_GB"]["max_unit"] == 10
    assert cpu_traits("flags\t\t: fpu sse sse2 avx2 aes vmx\n") == {
        "HW_CPU_X86_SSE", "HW_CPU_X86_SSE2", "HW_CPU_X86_AVX2", "HW_CPU_X86_AESNI",
        "HW_CPU_X86_VMX"}


def test_an_inventory_record_has_every_field_placement_needs():
    record = build_inventory({"VCPU": 4}, {})["VCPU"]
    assert record == {"total": 4, "reserved": 0, "allocation_ratio": 1.0, "min_unit": 1,
                      "max_unit": 4, "step_size": 1}
    assert isinstance(record["allocation_ratio"], float)


def test_reserved_never_exceeds_the_total():
    inventory = build_inventory({"MEMORY_MB": 512}, {"MEMORY_MB": {"reserved": 1024}})
    assert inventory["MEMORY_MB"]["reserved"] == 512


def test_policy_for_a_class_that_was_not_measured_adds_nothing():
    assert set(build_inventory({"VCPU": 2}, {"DISK_GB": {"total": 5}})) == {"VCPU"}


def test_only_the_first_cpus_flags_count():
    cpuinfo = ("processor\t: 0\nflags\t\t: sse avx\n\n"
               "processor\t: 1\nflags\t\t: sse avx avx512f\n")
    assert cpu_traits(cpuinfo) == {"HW_CPU_X86_SSE", "HW_CPU_X86_AVX"}


def test_flags_are_matched_whole_not_as_substrings():
    assert cpu_traits("flags : sse4_1 avx512bw\n") == {"HW_CPU_X86_SSE41", "HW_CPU_X86_AVX512BW"}
    assert cpu_traits("flags : pni\n") == {"HW_CPU_X86_SSE3"}


def test_no_flags_line_means_no_traits():
    assert cpu_traits("processor\t: 0\nmodel name\t: ARM\n") == set()
    assert cpu_traits("") == set()


def test_every_trait_name_is_a_standard_x86_cpu_trait():
    assert all(t.startswith("HW_CPU_X86_") and t.isupper() for t in CPU_FLAG_TRAITS.values())
    assert len(set(CPU_FLAG_TRAITS.values())) == len(CPU_FLAG_TRAITS)


def test_this_machines_cpuinfo_is_read_when_none_is_given():
    assert cpu_traits() <= set(CPU_FLAG_TRAITS.values())


def test_disk_is_measured_on_the_nearest_existing_directory(tmp_path):
    missing = tmp_path / "not" / "yet" / "instances"
    totals = measure_totals(str(missing))
    assert totals["DISK_GB"] == psutil.disk_usage(str(tmp_path)).total // GiB
    assert totals["VCPU"] >= 1 and totals["MEMORY_MB"] > 0


def test_disk_is_the_file_system_less_the_image_cache_and_the_reserve():
    """The image cache (20 GB by default) shares the file system with the disks: once its
    room was offered to instances too."""
    inventory = build_inventory({"DISK_GB": 100},
                                {"DISK_GB": {"reserved": 5, "image_cache_gb": 20}})
    disk = inventory["DISK_GB"]
    assert (disk["total"], disk["reserved"]) == (80, 5)
    assert disk["total"] - disk["reserved"] == 100 - 20 - 5  # what instances may claim


def test_a_cache_larger_than_the_disk_leaves_nothing_to_claim():
    disk = build_inventory({"DISK_GB": 10}, {"DISK_GB": {"reserved": 1,
                                                          "image_cache_gb": 20}})["DISK_GB"]
    assert disk["total"] == 1 and disk["total"] - disk["reserved"] == 0


def test_a_configured_total_is_not_reduced_by_the_cache():
    disk = build_inventory({"DISK_GB": 100}, {"DISK_GB": {"total": 10,
                                                           "image_cache_gb": 20}})["DISK_GB"]
    assert disk["total"] == 10


def test_the_cache_cap_comes_from_the_libvirt_driver_unless_configured(tmp_path):
    from etcd_compute.config import load_compute

    path = tmp_path / "compute.yaml"
    path.write_text("driver:\n  libvirt:\n    image_cache_max_gb: 7.5\n")
    assert load_compute(str(path))["compute"]["inventory"]["DISK_GB"]["image_cache_gb"] == 7.5
    path.write_text("driver:\n  name: fake\n")
    assert load_compute(str(path))["compute"]["inventory"]["DISK_GB"]["image_cache_gb"] == 0
    path.write_text("compute:\n  inventory:\n    DISK_GB: {image_cache_gb: 2}\n")
    assert load_compute(str(path))["compute"]["inventory"]["DISK_GB"]["image_cache_gb"] == 2


@pytest.mark.parametrize(("machine", "trait"), [
    ("x86_64", "HW_ARCH_X86_64"), ("AMD64", "HW_ARCH_X86_64"), ("aarch64", "HW_ARCH_AARCH64"),
    ("arm64", "HW_ARCH_AARCH64"), ("i386", "HW_ARCH_I686")])
def test_the_architecture_trait_uses_nova_and_os_traits_names(machine, trait):
    assert arch_trait(machine) == trait


def test_this_machines_architecture_is_an_os_traits_name():
    assert arch_trait().startswith("HW_ARCH_")


@pytest.mark.parametrize(("driver", "kvm", "traits"), [
    ({"name": "fake"}, None, {"CUSTOM_HYPERVISOR_FAKE"}),
    ({"name": "libvirt", "libvirt": {"domain_type": "qemu"}}, True, {"CUSTOM_HYPERVISOR_QEMU"}),
    ({"name": "libvirt", "libvirt": {"domain_type": "kvm"}}, False,
     {"CUSTOM_HYPERVISOR_QEMU", "CUSTOM_HYPERVISOR_KVM"}),
    ({"name": "libvirt", "libvirt": {"domain_type": "auto"}}, True,
     {"CUSTOM_HYPERVISOR_QEMU", "CUSTOM_HYPERVISOR_KVM"}),
    ({"name": "libvirt", "libvirt": {"domain_type": "auto"}}, False, {"CUSTOM_HYPERVISOR_QEMU"}),
])
def test_hypervisor_traits_say_which_images_run_here(driver, kvm, traits):
    assert hypervisor_traits(driver, kvm=kvm) == traits

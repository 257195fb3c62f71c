"""What a host offers: inventory measured with psutil, traits from /proc/cpuinfo, its
architecture and hypervisor types (what the ImagePropertiesFilter compares with an
image's properties)."""

from __future__ import annotations

import math
import os
import platform
from pathlib import Path
from typing import Any

MiB = 1024 * 1024
GiB = 1024 * MiB

# /proc/cpuinfo flags -> os-traits names. Only names Placement knows are sent.
CPU_FLAG_TRAITS = {
    "mmx": "HW_CPU_X86_MMX",
    "sse": "HW_CPU_X86_SSE",
    "sse2": "HW_CPU_X86_SSE2",
    "pni": "HW_CPU_X86_SSE3",
    "ssse3": "HW_CPU_X86_SSSE3",
    "sse4_1": "HW_CPU_X86_SSE41",
    "sse4_2": "HW_CPU_X86_SSE42",
    "sse4a": "HW_CPU_X86_SSE4A",
    "avx": "HW_CPU_X86_AVX",
    "avx2": "HW_CPU_X86_AVX2",
    "avx512f": "HW_CPU_X86_AVX512F",
    "avx512cd": "HW_CPU_X86_AVX512CD",
    "avx512bw": "HW_CPU_X86_AVX512BW",
    "avx512dq": "HW_CPU_X86_AVX512DQ",
    "avx512vl": "HW_CPU_X86_AVX512VL",
    "aes": "HW_CPU_X86_AESNI",
    "fma": "HW_CPU_X86_FMA3",
    "fma4": "HW_CPU_X86_FMA4",
    "f16c": "HW_CPU_X86_F16C",
    "bmi1": "HW_CPU_X86_BMI",
    "bmi2": "HW_CPU_X86_BMI2",
    "abm": "HW_CPU_X86_ABM",
    "pclmulqdq": "HW_CPU_X86_CLMUL",
    "sha_ni": "HW_CPU_X86_SHA",
    "vmx": "HW_CPU_X86_VMX",
    "svm": "HW_CPU_X86_SVM",
    "xop": "HW_CPU_X86_XOP",
    "tbm": "HW_CPU_X86_TBM",
}


def cpu_traits(cpuinfo: str | None = None) -> set[str]:
    """Standard HW_CPU_X86_* trait names for the flags of the first CPU."""
    if cpuinfo is None:
        try:
            cpuinfo = Path("/proc/cpuinfo").read_text()
        except OSError:
            return set()
    for line in cpuinfo.splitlines():
        if line.startswith("flags"):
            flags = set(line.split(":", 1)[1].split())
            return {trait for flag, trait in CPU_FLAG_TRAITS.items() if flag in flags}
    return set()


# platform.machine() -> Nova's canonical architecture names (os-traits HW_ARCH_*).
MACHINE_ARCH = {"amd64": "x86_64", "i386": "i686", "i586": "i686", "arm64": "aarch64"}


def arch_trait(machine: str | None = None) -> str:
    """HW_ARCH_<ARCH> of this machine (os-traits' names: HW_ARCH_X86_64, HW_ARCH_AARCH64)."""
    arch = (machine or platform.machine()).lower()
    return f"HW_ARCH_{MACHINE_ARCH.get(arch, arch).upper()}"


def hypervisor_traits(driver: dict[str, Any], kvm: bool | None = None) -> set[str]:
    """CUSTOM_HYPERVISOR_<TYPE> for the hypervisor types this host's guests run under (no
    standard trait exists): libvirt with KVM runs `kvm` and `qemu` images (as Nova's
    libvirt driver reports), TCG `qemu` only; the fake driver `fake`."""
    if driver["name"] != "libvirt":
        return {f"CUSTOM_HYPERVISOR_{driver['name'].upper()}"}
    domain_type = driver["libvirt"]["domain_type"]
    if domain_type == "auto":
        usable = kvm if kvm is not None else os.access("/dev/kvm", os.R_OK | os.W_OK)
        domain_type = "kvm" if usable else "qemu"
    return {"CUSTOM_HYPERVISOR_QEMU"} | ({"CUSTOM_HYPERVISOR_KVM"} if domain_type == "kvm"
                                        else set())


def _existing_ancestor(path: Path) -> Path:
    while not path.exists() and path != path.parent:
        path = path.parent
    return path


# What `measure_totals` measures.
MEASURED = ("VCPU", "MEMORY_MB", "DISK_GB")


def host_totals(instances_dir: str, policy: dict[str, dict[str, Any]]) -> dict[str, int]:
    """The raw totals `build_inventory` starts from: measured, unless every one is
    configured (simulated hosts, the tests'): a configured total replaces the measured
    one, so nothing is measured then."""
    if all("total" in policy.get(rc, {}) for rc in MEASURED):
        return {rc: int(policy[rc]["total"]) for rc in MEASURED}
    return measure_totals(instances_dir)


def measure_totals(instances_dir: str) -> dict[str, int]:
    """Raw totals of this machine: logical CPUs, memory, disk under `instances_dir`."""
    import psutil  # here: a host whose totals are all configured never measures (~6 ms)

    disk = psutil.disk_usage(str(_existing_ancestor(Path(instances_dir))))
    return {
        "VCPU": psutil.cpu_count(logical=True) or 1,
        "MEMORY_MB": psutil.virtual_memory().total // MiB,
        "DISK_GB": disk.total // GiB,
    }


def build_inventory(totals: dict[str, int], policy: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """Placement inventory records: totals with reserved / allocation_ratio from config.

    A configured `total` replaces the measured one (used for simulated hosts).
    DISK_GB: the measured file system less the image cache's cap (`image_cache_gb`),
    which shares it; `reserved` is the configured reserve on top. What instances
    may claim is the file system size less both.
    """
    inventory = {}
    for resource_class, measured in totals.items():
        settings = policy.get(resource_class, {})
        if resource_class == "DISK_GB":
            measured -= math.ceil(settings.get("image_cache_gb") or 0)
        # Placement wants a total of at least 1; a full reserve leaves nothing to claim.
        total = max(1, int(settings.get("total", measured)))
        reserved = min(int(settings.get("reserved", 0)), total)
        inventory[resource_class] = {
            "total": total,
            "reserved": reserved,
            "allocation_ratio": float(settings.get("allocation_ratio", 1.0)),
            "min_unit": 1,
            "max_unit": total,
            "step_size": 1,
        }
    return inventory

"""Configuration loading and compute.py's behaviour on bad input."""

from __future__ import annotations

import pytest

from etcd_compute import config as configuration
from etcd_compute.compute.identity import fake_identities, load_identity
from etcd_compute.compute.inventory import build_inventory, cpu_traits
from etcd_compute.errors import ConfigError
from tests.support import REPO, Run, run_cli
from tools.local_services import free_port


def run_compute(*args: str, timeout: float = 60) -> Run:
    return run_cli("compute.py", *args, timeout=timeout)


def test_deep_merge_keeps_sibling_keys():
    merged = configuration.deep_merge(configuration.COMPUTE_DEFAULTS,
                                      {"compute": {"inventory": {"VCPU": {"reserved": 2}}}})
    assert merged["compute"]["inventory"]["VCPU"] == {"reserved": 2, "allocation_ratio": 4.0}
    assert merged["compute"]["inventory"]["MEMORY_MB"]["reserved"] == 1024
    assert merged["compute"]["workers"] == 4
    # and the defaults themselves were not modified
    assert configuration.COMPUTE_DEFAULTS["compute"]["inventory"]["VCPU"]["reserved"] == 0


@pytest.mark.parametrize(
    ("yaml_text", "message"),
    [
        ("compute:\n  workerz: 3\n", "unknown key 'compute.workerz'"),
        ("colour: blue\n", "unknown key 'colour'"),
        ("compute:\n  workers: many\n", "compute.workers: 'many' is not of type 'integer'"),
        ("etcd:\n  endpoints: [localhost]\n", "etcd.endpoints.0"),
        ("placement:\n  endpoint: ftp://x\n", "placement.endpoint"),
        ("compute: [1, 2\n", "cannot read YAML"),
        ("- a list\n", "top level must be a mapping"),
    ],
)
def test_bad_config_is_one_line_error_naming_the_key(tmp_path, yaml_text, message):
    path = tmp_path / "compute.yaml"
    path.write_text(yaml_text)
    with pytest.raises(ConfigError) as error:
        configuration.load_compute(str(path))
    assert message in str(error.value)
    assert "\n" not in str(error.value)


def test_samples_in_the_repository_are_valid():
    assert configuration.load_compute(str(REPO / "compute.yaml"))["driver"]["name"] == "libvirt"
    assert configuration.load_schedule(str(REPO / "schedule.yaml"))["scheduler"]["filters"]


def test_identity_is_generated_once_and_kept(compute_config):
    config = configuration.deep_merge(compute_config, {"compute": {"uuid": None}})
    first = load_identity(config)
    assert load_identity(config) == first
    fakes = fake_identities(first, 3)
    assert fake_identities(first, 3) == fakes and len({f.uuid for f in fakes}) == 3


def test_inventory_policy_and_cpu_traits():
    inventory = build_inventory({"VCPU": 8, "MEMORY_MB": 4096, "DISK_GB": 100},
                                {"VCPU": {"allocation_ratio": 2.0},
                                 "MEMORY_MB": {"reserved": 512},
                                 "DISK_GB": {"total": 10}})
    assert inventory["VCPU"]["total"] == 8 and inventory["VCPU"]["allocation_ratio"] == 2.0
    assert inventory["MEMORY_MB"]["reserved"] == 512
    assert inventory["DISK_GB"]["total"] == 10 and inventory["DISK_GB"]["max_unit"] == 10
    assert cpu_traits("flags\t\t: fpu sse sse2 avx2 aes vmx\n") == {
        "HW_CPU_X86_SSE", "HW_CPU_X86_SSE2", "HW_CPU_X86_AVX2", "HW_CPU_X86_AESNI",
        "HW_CPU_X86_VMX"}


def test_compute_bad_config_exits_2_with_one_line(tmp_path):
    path = tmp_path / "c.yaml"
    path.write_text("compute:\n  workers: -1\n")
    result = run_compute("--config", str(path))
    assert result.code == 2
    assert result.stderr.startswith("compute.py: error: ") and "compute.workers" in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1 and "Traceback" not in result.stderr


def test_compute_missing_config_file(tmp_path):
    result = run_compute("--config", str(tmp_path / "nope.yaml"))
    assert result.code == 2 and "no such configuration file" in result.stderr


def test_compute_unreachable_etcd_is_one_line(tmp_path, write_yaml, compute_config):
    config = configuration.deep_merge(compute_config, {
        "etcd": {"endpoints": [f"127.0.0.1:{free_port()}"], "timeout": 1.0}})
    result = run_compute("--config", str(write_yaml("c.yaml", config)), "--check")
    assert result.code == 3, result.stderr
    assert "etcd at 127.0.0.1:" in result.stderr and "unreachable" in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1


def test_compute_unreachable_placement_is_one_line(tmp_path, write_yaml, compute_config):
    config = configuration.deep_merge(compute_config, {
        "placement": {"endpoint": f"http://127.0.0.1:{free_port()}"}})
    result = run_compute("--config", str(write_yaml("c.yaml", config)))
    assert result.code == 3, result.stderr
    assert "Placement at http://127.0.0.1:" in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1


def test_compute_check_reaches_everything(write_yaml, compute_config):
    result = run_compute("--config", str(write_yaml("c.yaml", compute_config)), "--check")
    assert result.code == 0, result.stderr
    lines = result.stdout.splitlines()
    assert lines[0] == "config: ok"
    assert lines[1].startswith("etcd: ok (version 3.")
    assert lines[2].startswith("placement: ok (Placement 1.0..1.")
    assert lines[3] == "driver: ok (fake)"


def test_compute_check_with_libvirt_test_driver(write_yaml, compute_config, libvirt_test_conn):
    config = configuration.deep_merge(compute_config, {
        "driver": {"name": "libvirt", "libvirt": {"uri": "test:///default"}}})
    result = run_compute("--config", str(write_yaml("c.yaml", config)), "--check")
    assert result.code == 0, result.stderr
    assert result.stdout.splitlines()[3].startswith("driver: ok")

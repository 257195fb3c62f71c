"""Real guests from an image in the real Glance: schedule.py --image NAME -> the compute
downloads /v2/images/<id>/file with its service credential, checks size and sha512, and
boots it; two guests of one image download it once (the cache, keyed by id and sha512)."""

from __future__ import annotations

import re
import uuid as uuidlib
from pathlib import Path
from typing import Any

import pytest

from etcd_compute.config import deep_merge
from tests.compute.helpers import wait_state
from tests.support import wait_for
from tests.virt.conftest import libvirt_compute

pytestmark = pytest.mark.vm


def glance_compute(vm_config: dict[str, Any], compute_config: dict[str, Any],
                   glance_config: dict[str, Any]) -> dict[str, Any]:
    """A libvirt compute (the VM tests' network and directories) that reaches Glance."""
    return libvirt_compute(vm_config, compute_config, glance=glance_config)


def test_two_guests_boot_by_name_from_glance_and_share_one_download(
        vm_config, test_guest_image: Path, compute_config, glance_config, glance_images,
        start_compute, run_schedule, schedule_config, write_yaml, store, placement,
        tmp_path: Path) -> None:
    name = f"test-guest-{uuidlib.uuid4().hex[:8]}"
    image = glance_images(test_guest_image, name, visibility="public",
                          architecture="x86_64", hypervisor_type="qemu")
    config = glance_compute(vm_config, compute_config, glance_config)
    rp = config["compute"]["uuid"]
    compute = start_compute(config)
    wait_for(lambda: store.get(store.keys.alive(rp)), 60, what="compute heartbeat")
    schedule = write_yaml("schedule-glance.yaml", deep_merge(schedule_config,
                                                             {"glance": glance_config}))

    placed = run_schedule("resources=VCPU:1,MEMORY_MB:128,DISK_GB:1", "--image", name,
                          "--count", "2", config=schedule, timeout=120)
    assert placed.code == 0, placed.stderr
    uuids = re.findall(r"OF INSTANCE (\S+)", placed.stdout)
    assert len(uuids) == 2
    try:
        for uuid in uuids:
            active = wait_state(store, uuid, "ACTIVE", timeout=240)
            assert active["image"] == f"{glance_config['endpoint']}/v2/images/{image['id']}/file"
        instances_dir = Path(config["compute"]["instances_dir"])
        for uuid in uuids:
            wait_for(lambda u=uuid: "ETCD-COMPUTE-GUEST ready" in _console(instances_dir, u),
                     180, interval=0.5, what=f"guest {uuid} to boot")
        downloads = compute.log().count(f"image {image['id']} (Glance): downloading")
        assert downloads == 1, compute.log()[-3000:]
        cached = [p for p in Path(vm_config["driver"]["libvirt"]["image_cache_dir"]).glob(
            "*.json") if image["id"] in p.read_text()]
        assert len(cached) == 1
    finally:
        for uuid in uuids:
            run_schedule("destroy", uuid, "--wait", config=schedule, timeout=120)
    assert placement.get(f"/resource_providers/{rp}/allocations")["allocations"] == {}


def _console(instances_dir: Path, uuid: str) -> str:
    try:
        return (instances_dir / uuid / "console.log").read_text(errors="replace")
    except OSError:
        return ""

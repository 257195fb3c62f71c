"""schedule.py --image NAME|ID against the real Glance and Keystone, with fake-driver hosts:
the image is found as the requesting project sees it, checked against the request and
the hosts (ImagePropertiesFilter on their traits) before anything is claimed, and the spec
carries what the host needs to fetch it, never a token."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest

from etcd_compute import config as configuration
from tests.compute.helpers import wait_state
from tests.support import wait_for

QUERY = "resources=VCPU:1,MEMORY_MB:256,DISK_GB:1"


@pytest.fixture
def raw_image(tmp_path: Path) -> Path:
    path = tmp_path / "disk.raw"
    path.write_bytes(b"\0" * 65536)
    return path


@pytest.fixture
def schedule_as(schedule_config: dict[str, Any], glance_config: dict[str, Any],
                project_ids: dict[str, str], write_yaml: Any, run_schedule: Any) -> Any:
    """Run schedule.py for project `project` (scheduler.project_id) with Glance."""

    def run(project: str, *args: str) -> Any:
        config = configuration.deep_merge(schedule_config, {
            "glance": glance_config, "scheduler": {"project_id": project_ids[project]}})
        return run_schedule(*args, config=write_yaml(f"schedule-{project}.yaml", config))

    return run


@pytest.fixture
def host(compute_config: dict[str, Any], start_compute: Any, store: Any,
         placement: Any) -> dict[str, Any]:
    """A fake-driver compute, registered (after `placement` emptied Placement)."""
    start_compute(compute_config)
    rp = compute_config["compute"]["uuid"]
    wait_for(lambda: store.get(store.keys.alive(rp)), 30, what="heartbeat")
    wait_for(lambda: "CUSTOM_HYPERVISOR_FAKE" in placement.get_traits(rp), 30,
             what="the host's traits")
    return compute_config


def nothing_claimed_or_written(placement: Any, store: Any, rp: str) -> None:
    assert placement.get(f"/resource_providers/{rp}/allocations")["allocations"] == {}
    assert store.get_prefix(store.keys.specs(rp))[0] == []


def test_an_image_named_in_glance_is_placed_with_what_the_host_needs_and_no_token(
        host, schedule_as, glance_images, raw_image, store, placement):
    image = glance_images(raw_image, "schedule-public-raw", disk_format="raw",
                          visibility="public", architecture="x86_64")
    placed = schedule_as("demo", QUERY, "--image", "schedule-public-raw")
    assert placed.code == 0, placed.stderr
    uuid = re.search(r"OF INSTANCE (\S+)", placed.stdout).group(1)
    rp = host["compute"]["uuid"]
    entry = store.get(store.keys.spec(rp, uuid))
    spec = json.loads(entry.value)
    endpoint = glance_images.client.endpoint
    assert spec["image"] == {
        "url": f"{endpoint}/v2/images/{image['id']}/file", "sha256": None,
        "glance": {"id": image["id"], "name": "schedule-public-raw",
                   "sha512": image["os_hash_value"], "size": 65536, "endpoint": endpoint,
                   "architecture": "x86_64"}}
    assert "token" not in entry.value.decode().lower()
    wait_state(store, uuid, "ACTIVE")
    # By id too.
    again = schedule_as("demo", QUERY, "--image", image["id"])
    assert again.code == 0, again.stderr


def test_an_image_no_host_can_run_is_refused_by_the_image_properties_filter(
        host, schedule_as, glance_images, raw_image, store, placement):
    glance_images(raw_image, "schedule-kvm-only", disk_format="raw", visibility="public",
                  hypervisor_type="kvm")
    refused = schedule_as("demo", QUERY, "--image", "schedule-kvm-only")
    assert refused.code == 1, refused.stdout
    assert refused.stdout.splitlines()[0] == "NO ALLOCATIONS LEFT"
    assert "ImagePropertiesFilter removed 1 host(s): does not support the image's " \
           "architecture or hypervisor type" in refused.stdout
    nothing_claimed_or_written(placement, store, host["compute"]["uuid"])


def test_another_projects_private_image_is_refused_before_any_claim(
        host, schedule_as, glance_images, raw_image, store, placement, project_ids):
    image = glance_images(raw_image, "schedule-demo-private", disk_format="raw",
                          visibility="private", owner=project_ids["demo"])
    rp = host["compute"]["uuid"]
    for name_or_id in ("schedule-demo-private", image["id"]):
        refused = schedule_as("alt", QUERY, "--image", name_or_id)
        assert refused.code == 2, refused.stdout
        assert refused.stderr.strip() == (
            f"schedule.py: error: --image {name_or_id!r}: no such image in Glance visible "
            f"to project {project_ids['alt']}")
        nothing_claimed_or_written(placement, store, rp)
    placed = schedule_as("demo", QUERY, "--image", "schedule-demo-private")
    assert placed.code == 0, placed.stderr


@pytest.mark.parametrize(("fields", "fault"), [
    ({"min_disk": 2}, "needs DISK_GB:2 (min_disk); the request claims DISK_GB:1"),
    ({"min_ram": 1024}, "needs MEMORY_MB:1024 (min_ram); the request claims MEMORY_MB:256"),
    ({"disk_format": "vmdk"}, "disk_format vmdk cannot be booted (only qcow2 or raw)"),
])
def test_what_the_image_needs_is_checked_before_any_claim(
        host, schedule_as, glance_images, raw_image, store, placement, fields, fault):
    fields = {"disk_format": "raw", "visibility": "public", **fields}
    if fields["disk_format"] == "vmdk":
        fields["container_format"] = "ovf"  # Glance would refuse raw bytes as a bare vmdk
    glance_images(raw_image, "schedule-needs-more", **fields)
    refused = schedule_as("demo", QUERY, "--image", "schedule-needs-more")
    assert refused.code == 2, refused.stdout
    assert fault in refused.stderr and refused.stderr.count("\n") == 1, refused.stderr
    nothing_claimed_or_written(placement, store, host["compute"]["uuid"])


def test_without_a_glance_section_an_image_name_is_a_one_line_config_error(
        host, run_schedule):
    refused = run_schedule(QUERY, "--image", "cirros")
    assert refused.code == 2
    assert "glance.keystone is not set" in refused.stderr


def test_a_rebuild_names_an_image_in_glance_checked_against_the_instances_size(
        host, schedule_as, glance_images, raw_image, store):
    first = glance_images(raw_image, "rebuild-from", disk_format="raw", visibility="public")
    second = glance_images(raw_image, "rebuild-to", disk_format="raw", visibility="public")
    glance_images(raw_image, "rebuild-too-big", disk_format="raw", visibility="public",
                  min_disk=5)
    placed = schedule_as("demo", QUERY, "--image", "rebuild-from", "--wait")
    assert placed.code == 0, placed.stderr
    uuid = re.search(r"OF INSTANCE (\S+)", placed.stdout).group(1)
    assert first["id"] in wait_state(store, uuid, "ACTIVE")["image"]
    refused = schedule_as("demo", "rebuild", "--image", "rebuild-too-big", uuid)
    assert refused.code == 2 and "needs DISK_GB:5 (min_disk); the request claims DISK_GB:1" \
        in refused.stderr, refused.stderr
    rebuilt = schedule_as("demo", "rebuild", "--image", "rebuild-to", uuid, "--wait")
    assert rebuilt.code == 0, rebuilt.stderr
    record = wait_state(store, uuid, "ACTIVE")
    assert second["id"] in record["image"]
    spec = json.loads(store.get(store.keys.spec(host["compute"]["uuid"], uuid)).value)
    assert spec["image"]["glance"]["id"] == second["id"]

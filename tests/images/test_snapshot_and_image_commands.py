"""schedule.py snapshot and image commands against the real Glance and Keystone, with a
fake-driver compute (it uploads a real, empty qcow2 through the same upload as the libvirt
driver): a snapshot ends as the instance was, its image owned by the instance's project;
a failed upload leaves no image and the instance as it was; image list, show, upload and
delete. (A live snapshot of a real guest: tests/virt/test_snapshot_vm.py.)"""

from __future__ import annotations

import re
import subprocess
from pathlib import Path
from typing import Any

import pytest

from etcd_compute import config as configuration
from etcd_compute.ops import lifecycle
from tests.compute.helpers import wait_state
from tests.support import wait_for

QUERY = "resources=VCPU:1,MEMORY_MB:256,DISK_GB:1"


@pytest.fixture
def glance_schedule(schedule_config: dict[str, Any], glance_config: dict[str, Any],
                    write_yaml: Any, run_schedule: Any) -> Any:
    path = write_yaml("schedule-glance.yaml",
                      configuration.deep_merge(schedule_config, {"glance": glance_config}))

    def run(*args: str, timeout: float = 120) -> Any:
        return run_schedule(*args, config=path, timeout=timeout)

    return run


def start_host(compute_config: dict[str, Any], glance: dict[str, Any], start_compute: Any,
               store: Any) -> dict[str, Any]:
    config = configuration.deep_merge(compute_config, {"glance": glance})
    start_compute(config)
    rp = config["compute"]["uuid"]
    wait_for(lambda: store.get(store.keys.alive(rp)), 30, what="heartbeat")
    return config


def placed(glance_schedule: Any, store: Any) -> str:
    run = glance_schedule(QUERY, "--wait")
    assert run.code == 0, run.stderr
    uuid = re.search(r"OF INSTANCE (\S+)", run.stdout).group(1)
    wait_state(store, uuid, "ACTIVE")
    return uuid


def images_named(glance: Any, name: str) -> list[dict[str, Any]]:
    return glance.list(name=name)


def test_a_snapshot_ends_as_the_instance_was_with_the_projects_image(
        compute_config, glance_config, start_compute, store, placement, glance_schedule,
        glance_images, schedule_config):
    start_host(compute_config, glance_config, start_compute, store)
    uuid = placed(glance_schedule, store)
    glance = glance_images.client
    try:
        for state, name in (("ACTIVE", "fake-snap-running"), ("SHUTOFF", "fake-snap-off")):
            if state == "SHUTOFF":
                assert glance_schedule("stop", uuid, "--wait").code == 0
            taken = glance_schedule("snapshot", uuid, name, "--wait")
            assert taken.code == 0, taken.stdout + taken.stderr
            image_id = re.search(rf"IMAGE (\S+) {name} ACTIVE", taken.stdout).group(1)
            assert wait_state(store, uuid, state)["state"] == state
            image = glance.get(image_id)
            assert (image["owner"], image["image_type"], image["instance_uuid"],
                    image["visibility"], image["min_disk"]) == (
                schedule_config["scheduler"]["project_id"], "snapshot", uuid, "private", 1)
            event = lifecycle.instance_events(store, uuid)[-1]
            assert (event["action"], event["result"]) == ("snapshot", "success")
            assert image_id in event["detail"]
            # The image commands see it (scheduler.project_id owns it).
            listed = glance_schedule("image", "list")
            assert listed.code == 0 and image_id in listed.stdout and "snapshot" in listed.stdout
            shown = glance_schedule("image", "show", name)
            assert shown.code == 0 and f"instance_uuid     {uuid}" in shown.stdout
            assert glance_schedule("image", "delete", name).code == 0
            assert images_named(glance, name) == []
    finally:
        glance_schedule("destroy", uuid, "--wait")


def test_a_failed_upload_leaves_no_image_and_the_instance_as_it_was(
        compute_config, glance_config, start_compute, store, placement, glance_schedule,
        glance_images):
    wrong = configuration.deep_merge(glance_config, {"keystone": {"password": "not-it"}})
    start_host(compute_config, wrong, start_compute, store)
    uuid = placed(glance_schedule, store)
    try:
        failed = glance_schedule("snapshot", uuid, "fake-snap-fails", "--wait")
        assert failed.code == 1, failed.stdout
        assert "snapshot of" in failed.stderr and "failed: snapshot: upload to Glance image" \
            in failed.stderr and "Keystone refused our credentials" in failed.stderr, \
            failed.stderr
        assert failed.stderr.count("\n") == 1
        assert images_named(glance_images.client, "fake-snap-fails") == []
        assert wait_state(store, uuid, "ACTIVE")["state"] == "ACTIVE"
        event = lifecycle.instance_events(store, uuid)[-1]
        assert (event["action"], event["result"]) == ("snapshot", "error")
    finally:
        glance_schedule("destroy", uuid, "--wait")


def test_a_snapshot_refused_in_its_state_makes_no_image(
        compute_config, glance_config, start_compute, store, placement, glance_schedule,
        glance_images):
    start_host(compute_config, glance_config, start_compute, store)
    uuid = placed(glance_schedule, store)
    try:
        assert glance_schedule("destroy", uuid, "--wait").code == 0
        refused = glance_schedule("snapshot", uuid, "fake-snap-refused")
        assert refused.code == 1
        assert "snapshot is not allowed now" in refused.stderr, refused.stderr
        assert images_named(glance_images.client, "fake-snap-refused") == []
    finally:
        glance_schedule("destroy", uuid)


def test_an_image_is_uploaded_from_a_file_listed_shown_and_deleted(
        glance_schedule, glance_images, tmp_path: Path):
    disk = tmp_path / "disk.qcow2"
    subprocess.run(["qemu-img", "create", "-q", "-f", "qcow2", str(disk), "64M"], check=True)
    uploaded = glance_schedule("image", "upload", str(disk), "cli-uploaded")
    assert uploaded.code == 0, uploaded.stderr
    image_id = re.search(r"IMAGE (\S+) cli-uploaded ACTIVE \(qcow2, ", uploaded.stdout).group(1)
    try:
        assert image_id in glance_schedule("image", "list").stdout
        shown = glance_schedule("image", "show", image_id, "--json")
        assert shown.code == 0 and '"disk_format": "qcow2"' in shown.stdout
        vmdk = tmp_path / "disk.vmdk"
        subprocess.run(["qemu-img", "create", "-q", "-f", "vmdk", str(vmdk), "1M"], check=True)
        refused = glance_schedule("image", "upload", str(vmdk), "cli-vmdk")
        assert refused.code == 2 and "a vmdk image (qcow2 or raw only)" in refused.stderr
        assert images_named(glance_images.client, "cli-vmdk") == []
    finally:
        assert glance_schedule("image", "delete", image_id).code == 0
    missing = glance_schedule("image", "show", image_id)
    assert missing.code == 1 and "no such image" in missing.stderr

"""A live snapshot into Glance, then a guest booted from it: schedule.py boots the test guest
by name, its user-data writes a marker to its disk; `schedule.py snapshot UUID NAME --wait`
of the running guest (it keeps running: same qemu process); the image is in Glance, owned
by the instance's project, with Nova's snapshot properties; a new guest booted by the
snapshot's name finds the marker on its disk and says so on its console. A paused guest's
snapshot is live too: it stays paused (PAUSED, the same qemu process, libvirt's paused
domain), as Nova's of a paused server."""

from __future__ import annotations

import re
import uuid as uuidlib
from pathlib import Path

import libvirt
import pytest

from etcd_compute import messages
from etcd_compute.config import deep_merge
from etcd_compute.ops import lifecycle
from tests.compute.helpers import record, wait_state
from tests.support import wait_for
from tests.virt.conftest import libvirt_compute

pytestmark = pytest.mark.vm

QUERY = "resources=VCPU:1,MEMORY_MB:128,DISK_GB:1"
# The guest mounts its disk's FAT partition at /persist as it boots (read-write: a second
# read-only mount of it is refused while that one holds it).
WRITE_MARKER = """#!/bin/sh
. /etc/guest-functions
grep -q " /persist vfat " /proc/mounts && echo {marker} > /persist/marker.txt && sync \\
  && say "marker written"
"""
READ_MARKER = """#!/bin/sh
. /etc/guest-functions
grep -q " /persist vfat " /proc/mounts && say "marker=$(cat /persist/marker.txt)"
"""


def console(instances_dir: Path, uuid: str) -> str:
    try:
        return (instances_dir / uuid / "console.log").read_text(errors="replace")
    except OSError:
        return ""


@pytest.mark.parametrize("paused", [False, True], ids=["running", "paused"])
def test_a_live_snapshot_boots_with_what_the_guest_wrote(
        paused: bool, vm_config, test_guest_image: Path, compute_config, glance_config,
        glance_images, start_compute, run_schedule, schedule_config, write_yaml, store, placement,
        tmp_path: Path) -> None:
    name = f"test-guest-{uuidlib.uuid4().hex[:8]}"
    glance_images(test_guest_image, name, visibility="public", architecture="x86_64",
                  hypervisor_type="qemu")
    config = libvirt_compute(vm_config, compute_config, glance=glance_config)
    rp = config["compute"]["uuid"]
    instances_dir = Path(config["compute"]["instances_dir"])
    start_compute(config)
    wait_for(lambda: store.get(store.keys.alive(rp)), 60, what="compute heartbeat")
    schedule = write_yaml("schedule-glance.yaml", deep_merge(schedule_config,
                                                             {"glance": glance_config}))
    glance = glance_images.client
    marker = f"MARKER-{uuidlib.uuid4().hex}"
    writer = tmp_path / "write-marker"
    writer.write_text(WRITE_MARKER.format(marker=marker))
    reader = tmp_path / "read-marker"
    reader.write_text(READ_MARKER)
    made: list[str] = []
    snapshot_name = f"snap-{uuidlib.uuid4().hex[:8]}"
    try:
        placed = run_schedule(QUERY, "--image", name, "--user-data", str(writer),
                              config=schedule, timeout=120)
        assert placed.code == 0, placed.stderr
        first = re.search(r"OF INSTANCE (\S+)", placed.stdout).group(1)
        made.append(first)
        wait_state(store, first, "ACTIVE", timeout=240)
        wait_for(lambda: "ETCD-COMPUTE-GUEST marker written" in console(instances_dir, first),
                 240, interval=0.5, what="the first guest to write its marker")
        connection = libvirt.open("qemu:///system")
        qemu_before = connection.lookupByName(first).ID()
        if paused:
            done = run_schedule("pause", first, "--wait", config=schedule, timeout=120)
            assert done.code == 0, done.stderr

        taken = run_schedule("snapshot", first, snapshot_name, "--wait", config=schedule,
                             timeout=300)
        assert taken.code == 0, taken.stdout + taken.stderr
        image_id = re.search(r"IMAGE (\S+) " + snapshot_name + " ACTIVE", taken.stdout).group(1)
        # Live: the same guest (same qemu process) still runs, ACTIVE again (or PAUSED).
        assert connection.lookupByName(first).isActive()
        assert connection.lookupByName(first).ID() == qemu_before
        assert (connection.lookupByName(first).state()[0] == libvirt.VIR_DOMAIN_PAUSED) \
            is paused
        connection.close()
        assert record(store, first)["state"] == ("PAUSED" if paused else "ACTIVE")
        event = lifecycle.instance_events(store, first)[-1]
        assert (event["action"], event["result"]) == ("snapshot", "success")
        assert image_id in event["detail"] and "live" in event["detail"]
        image = glance.get(image_id)
        spec_of_first = store.read(messages.INSTANCE_SPEC, store.keys.spec(rp, first))[0]
        assert (image["status"], image["disk_format"], image["visibility"],
                image["image_type"], image["instance_uuid"], image["owner"]) == (
            "active", "qcow2", "private", "snapshot", first, spec_of_first["project_id"])
        assert image["base_image_ref"] == spec_of_first["image"]["glance"]["id"]

        booted = run_schedule(QUERY, "--image", snapshot_name, "--user-data", str(reader),
                              config=schedule, timeout=120)
        assert booted.code == 0, booted.stderr
        second = re.search(r"OF INSTANCE (\S+)", booted.stdout).group(1)
        made.append(second)
        wait_state(store, second, "ACTIVE", timeout=240)
        wait_for(lambda: f"ETCD-COMPUTE-GUEST marker={marker}" in console(instances_dir, second),
                 240, interval=0.5, what="the snapshot's guest to find the marker")
    finally:
        for uuid in made:
            run_schedule("destroy", uuid, "--wait", config=schedule, timeout=120)
        for image in glance.list(name=snapshot_name):
            glance.delete(image["id"])
    assert placement.get(f"/resource_providers/{rp}/allocations")["allocations"] == {}

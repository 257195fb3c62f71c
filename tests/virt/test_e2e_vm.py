"""The whole path with a real qemu guest: schedule.py -> compute.py -> libvirt -> guest.

schedule -> ACTIVE with IP -> the console shows the guest read its own
instance-id and user-data from both the config drive and the metadata
server, and took its hostname from them -> destroy leaves no domain, disk,
overlay, config drive, allocation or etcd key.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import libvirt
import pytest

from etcd_compute import messages
from etcd_compute.instances import ownership
from etcd_compute.virt.instance_files import InstanceFiles
from tests.compute.helpers import wait_state
from tests.support import wait_for
from tests.virt.conftest import libvirt_compute

pytestmark = pytest.mark.vm


def test_schedule_boot_console_destroy_with_a_real_guest(
    vm_config: dict[str, Any], test_guest_image: Path, compute_config: dict[str, Any],
    start_compute, run_schedule, store, placement, tmp_path: Path,
) -> None:
    config = libvirt_compute(vm_config, compute_config)
    rp = config["compute"]["uuid"]
    start_compute(config)
    wait_for(lambda: store.get(store.keys.alive(rp)), 60, what="compute heartbeat")
    user_data = tmp_path / "user-data"
    user_data.write_text("user-data-through-the-whole-stack\n")

    scheduled = run_schedule("resources=VCPU:1,MEMORY_MB:128,DISK_GB:1",
                             "--image", f"file://{test_guest_image}",
                             "--user-data", str(user_data), timeout=300)
    assert scheduled.code == 0, scheduled.stderr
    line = next(x for x in scheduled.stdout.splitlines() if x.startswith("NOTIFIED TARGET"))
    assert line.startswith(f"NOTIFIED TARGET, {rp}, OF INSTANCE ")
    uuid = line.split()[-1]

    active = wait_state(store, uuid, "ACTIVE", timeout=180)
    assert active["ip"] and active["ip"].startswith("192.168.124.")
    assert store.get(store.keys.booted(rp, uuid)).value.decode() == active["ip"]

    def console() -> str:
        published, _ = store.read(messages.CONSOLE, store.keys.console(rp, uuid))
        return published["text"] if published else ""

    wait_for(lambda: "ETCD-COMPUTE-GUEST hostname=" in console(), 120,
             interval=0.5, what="the guest to read its metadata")
    text = console()
    for source in ("configdrive", "metadata"):
        assert f"ETCD-COMPUTE-GUEST {source} instance-id={uuid}" in text
        assert f"ETCD-COMPUTE-GUEST {source} user-data=user-data-through-the-whole-stack" in text
    # Its hostname is its metadata's (the config drive's local-hostname), as cloud-init
    # sets it: Tempest's metadata meter compares `hostname` with meta-data/hostname.
    meta = InstanceFiles.of(config["compute"]["instances_dir"], uuid).read_meta()
    assert meta is not None
    lines = [line.strip() for line in text.splitlines()]
    assert f"ETCD-COMPUTE-GUEST hostname={meta['hostname']}" in lines
    shown = run_schedule("console", uuid)
    assert f"metadata instance-id={uuid}" in shown.stdout

    destroyed = run_schedule("destroy", uuid)
    assert destroyed.code == 0, destroyed.stderr
    wait_state(store, uuid, "DELETED", timeout=60)
    connection = libvirt.open("qemu:///system")
    try:
        with pytest.raises(libvirt.libvirtError):
            connection.lookupByName(uuid)
    finally:
        connection.close()
    assert not (Path(config["compute"]["instances_dir"]) / uuid).exists()
    assert placement.get_allocations(uuid)["allocations"] == {}
    for key in ownership.host_keys(store.keys, rp, uuid):
        assert store.get(key) is None, key

"""Hostile images served by the real Glance to a real libvirt compute (real qemu-img): bytes
from Glance are as hostile as from a URL. Glance inspects uploads in a bare container
itself (its own guard: a VMDK or a qcow2 with a data file uploaded as qcow2 is refused
there); one in an `ovf` container (booted as bare, as Nova does) it does not inspect, so
those reach the host, as do bytes changed behind Glance's back and a size Glance records
wrongly. Each build ends in ERROR as the request's fault (nothing counted against the host,
no reschedule), its claim freed, nothing left on the host: no domain, no instance files, no
image in the cache, no qemu-img."""

from __future__ import annotations

import re
import sqlite3
import uuid as uuidlib
from pathlib import Path
from typing import Any

import libvirt
import pytest

from etcd_compute import hosts
from etcd_compute.config import deep_merge
from etcd_compute.errors import GlanceError
from tests.compute.helpers import wait_state
from tests.support import wait_for
from tests.virt import image_sources
from tests.virt.conftest import libvirt_compute
from tests.virt.image_sources import leftover_children

pytestmark = pytest.mark.vm

QUERY = "resources=VCPU:1,MEMORY_MB:128,DISK_GB:1"


@pytest.fixture
def attack(vm_config, compute_config, glance_config, glance_images, start_compute,
           run_schedule, schedule_config, write_yaml, store, placement) -> Any:
    """A libvirt compute that reaches Glance; `attack(image)` schedules it by id and
    returns the ERROR record once the compute has cleaned up."""
    config = libvirt_compute(vm_config, compute_config, glance=glance_config)
    rp = config["compute"]["uuid"]
    start_compute(config)
    wait_for(lambda: store.get(store.keys.alive(rp)), 60, what="compute heartbeat")
    schedule = write_yaml("schedule-glance.yaml", deep_merge(schedule_config,
                                                             {"glance": glance_config}))
    instances_dir = Path(config["compute"]["instances_dir"])
    cache_dir = Path(config["driver"]["libvirt"]["image_cache_dir"])

    def run(image: dict[str, Any], *fragments: str) -> dict[str, Any]:
        placed = run_schedule(QUERY, "--image", image["id"], config=schedule, timeout=120)
        assert placed.code == 0, placed.stderr
        uuid = re.search(r"OF INSTANCE (\S+)", placed.stdout).group(1)
        record = wait_state(store, uuid, "ERROR", timeout=120)
        for fragment in fragments:
            assert fragment in record["error"], record["error"]
        assert "\n" not in record["error"]
        # The request's fault: not counted against the host. The compute counts a failure
        # (if it does) right after it writes ERROR, on its main loop; its capacity account
        # seen as of that write (the spec went with it) is published after, and keeps the
        # failures: once it is there, a failure counted would be too.
        failed_at = store.get(store.keys.record(rp, uuid)).mod_revision
        stats = wait_for(lambda: (s := hosts.stats(store, rp)) and s.get(
            "capacity", {}).get("as_of", 0) >= failed_at and s, 30,
            what="the compute's stats as of the ERROR")
        assert not stats.get("build_failures"), stats
        # Nothing left: claim, domain, instance files, cached image, qemu-img.
        wait_for(lambda: placement.get_allocations(uuid)["allocations"] == {}, 10,
                 what="the claim to be freed")
        connection = libvirt.open("qemu:///system")
        try:
            assert uuid not in {d.name() for d in connection.listAllDomains()}
        finally:
            connection.close()
        assert not (instances_dir / uuid).exists()
        if cache_dir.exists():
            left = [p.name for p in cache_dir.iterdir()
                    if p.suffix != ".lock" and image["id"] in _record_text(p)]
            assert left == [], left
            assert [p for p in cache_dir.iterdir() if p.suffix in (".download", ".converting")
                    ] == []
        assert list(leftover_children()) == []
        run_schedule("destroy", uuid, config=schedule)
        return record

    return run


def _record_text(path: Path) -> str:
    return path.read_text(errors="replace") if path.suffix == ".json" else ""


def test_glance_refuses_a_vmdk_or_a_data_file_qcow2_in_a_bare_container_itself(
        tmp_path, glance_images):
    descriptor = tmp_path / "disk.vmdk"
    descriptor.write_bytes(image_sources.vmdk_descriptor("/etc/shadow"))
    data_file = image_sources.qcow2_with_data_file(tmp_path, tmp_path / "host-secret.raw")
    for path, reason in ((descriptor, "does not match stream data vmdk"),
                         (data_file, "failed safety checks")):
        with pytest.raises(GlanceError) as caught:
            glance_images(path, f"bare-{path.name}", visibility="public")
        # Glance answers 415 (InvalidImageData) and keeps no data.
        assert caught.value.status == 415 and reason in str(caught.value), caught.value
    listed = glance_images.client.list()
    assert not [i for i in listed if i["name"].startswith("bare-") and i["status"] == "active"]


def test_a_vmdk_descriptor_naming_a_host_file_ends_in_error(tmp_path, glance_images, attack):
    descriptor = tmp_path / "disk.vmdk"
    descriptor.write_bytes(image_sources.vmdk_descriptor("/etc/shadow"))
    image = glance_images(descriptor, "attack-vmdk", container_format="ovf",
                          visibility="public")
    record = attack(image, "vmdk")
    assert "root:" not in record["error"]  # nothing of the named file was read


def test_a_qcow2_with_an_external_data_file_ends_in_error(tmp_path, glance_images, attack):
    secret = tmp_path / "host-secret.raw"
    image_path = image_sources.qcow2_with_data_file(tmp_path, secret)
    secret.write_bytes(b"HOST SECRET " * 1000)
    image = glance_images(image_path, "attack-data-file", container_format="ovf",
                          visibility="public")
    attack(image, "data_file")


def test_a_16_tib_virtual_disk_ends_in_error(tmp_path, glance_images, attack, run_schedule,
                                            schedule_config, glance_config, write_yaml):
    huge = image_sources.qcow2(tmp_path / "huge.qcow2", "16T")
    # In a bare container Glance records its virtual size: refused before any claim.
    recorded = glance_images(huge, "attack-16t-bare", visibility="public")
    schedule = write_yaml("schedule-16t.yaml", deep_merge(schedule_config,
                                                          {"glance": glance_config}))
    refused = run_schedule(QUERY, "--image", recorded["id"], config=schedule)
    assert refused.code == 2 and "virtual size 16384 GiB is larger than the 1 GiB disk" \
        in refused.stderr, refused.stderr
    # In an ovf container Glance records none: the host refuses it before conversion.
    unrecorded = glance_images(huge, "attack-16t-ovf", container_format="ovf",
                               visibility="public")
    assert unrecorded.get("virtual_size") is None
    attack(unrecorded, "virtual size 16384 GiB", "larger than the 1 GiB disk")


def test_bytes_changed_behind_glances_back_end_in_error(
        tmp_path, glance_images, glance_server, attack):
    original = image_sources.qcow2(tmp_path / "good.qcow2", "64M")
    image = glance_images(original, f"attack-swapped-{uuidlib.uuid4().hex[:6]}",
                          visibility="public")
    stored = glance_server.image_file(image["id"])
    swapped = bytearray(stored.read_bytes())
    swapped[-1] ^= 0xFF  # same size, other content
    stored.write_bytes(bytes(swapped))
    attack(image, "sha512 of the bytes does not match Glance's os_hash_value")


def test_a_size_glance_records_wrongly_ends_in_error(tmp_path, glance_images, glance_server,
                                                     attack):
    original = image_sources.qcow2(tmp_path / "good.qcow2", "64M")
    image = glance_images(original, "attack-size", visibility="public")
    size = image["size"]
    database = sqlite3.connect(glance_server.run_dir / "glance.sqlite")
    try:
        # Larger than its bytes: Glance's stream ends early.
        database.execute("UPDATE images SET size = ? WHERE id = ?", (size * 2, image["id"]))
        database.commit()
        attack(image, f"the download ended after {size} of the {size * 2} bytes Glance "
                      "recorded")
        # Smaller: Glance sends that many bytes, which are not the image it hashed.
        database.execute("UPDATE images SET size = ? WHERE id = ?", (size // 2, image["id"]))
        database.commit()
        attack(image, "sha512 of the bytes does not match Glance's os_hash_value")
    finally:
        database.execute("UPDATE images SET size = ? WHERE id = ?", (size, image["id"]))
        database.commit()
        database.close()

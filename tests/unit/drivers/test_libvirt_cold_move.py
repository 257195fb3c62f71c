"""drivers/libvirt_cold_move.py with libvirt's test driver for the host's own side and
stand-ins for the peer (tests/unit/drivers/migration_world.py): what the source sends and
how it starts the guest again when the copy is cut short; what the destination checks
before it defines the guest (every file whole, the same base image, a plain qcow2
overlay), and that it keeps the MAC. Real guests: tests/virt/test_migration_vm.py."""

from __future__ import annotations

import hashlib
import json
import struct
from pathlib import Path
from typing import Any

import pytest

from etcd_compute.drivers import libvirt_cold_move
from etcd_compute.errors import BuildError, RequestError
from etcd_compute.virt import domain, images, qemu_img
from etcd_compute.virt.remote_files import Sent
from tests.support import make_spec
from tests.unit.drivers.migration_world import RP, Domain, overlay, target


def test_a_cold_move_shuts_down_and_sends_disk_config_drive_and_console(driver, moving,
                                                                        monkeypatch):
    uuid = moving["uuid"]
    shut = []
    monkeypatch.setattr(driver, "_shut_down", lambda domain: shut.append(domain.name()))
    moved = driver.send_stopped(uuid, target(f"/srv/{uuid}"))
    assert shut == [uuid]
    assert list(moving["sent"][0]) == ["disk.qcow2", "config.iso", "console.history.log"]
    assert moved["was_running"] is True and moved["base_sha256"] is None
    assert [f["name"] for f in moved["files"]] == ["disk.qcow2", "config.iso",
                                                    "console.history.log"]


def test_a_cold_move_cut_short_starts_the_guest_again_here(driver, moving, monkeypatch):
    uuid = moving["uuid"]

    def stop(domain: Domain) -> None:
        domain.active = False

    def broken(*_args: Any, **_kwargs: Any) -> None:
        raise OSError("peer gone")

    monkeypatch.setattr(driver, "_shut_down", stop)
    monkeypatch.setattr(libvirt_cold_move, "send_files", broken)
    with pytest.raises(BuildError, match="peer gone; the guest is running here as before"):
        driver.send_stopped(uuid, target(f"/srv/{uuid}"))
    assert moving["domain"].active and ("create",) in moving["domain"].calls




# -- the destination's end of a cold move ----------------------------------------------------


@pytest.fixture
def arrived(driver, test_driver_config, tmp_path, monkeypatch):
    """A cold move's files as they arrived here, a base of the image in the cache."""
    url = f"file://{tmp_path}/image.qcow2"
    (tmp_path / "image.qcow2").write_bytes(b"the image")
    spec = make_spec(RP, url)
    driver.prepare_incoming(spec)
    directory = Path(test_driver_config["compute"]["instances_dir"]) / spec["uuid"]
    (directory / "disk.qcow2").write_bytes(overlay("/elsewhere/images/base.qcow2"))
    (directory / "config.iso").write_bytes(b"cidata")
    cache = images.ImageCache(test_driver_config["driver"]["libvirt"]["image_cache_dir"], 1 << 30)
    base = cache.base_path(url)
    base.parent.mkdir(parents=True, exist_ok=True)
    base.write_bytes(b"base")
    base.with_suffix(".json").write_text(json.dumps({"url": url, "sha256": "b" * 64}))
    rebased: list[tuple[Path, Path]] = []
    monkeypatch.setattr(qemu_img, "rebase_unsafe",
                        lambda path, new, fmt: rebased.append((path, new)))

    def sent(**changes: Any) -> dict[str, Any]:
        files = [Sent(name, (directory / name).stat().st_size,
                      hashlib.sha256((directory / name).read_bytes()).hexdigest()).to_dict()
                 for name in ("disk.qcow2", "config.iso")]
        return {"files": files, "macs": ["52:54:00:aa:bb:cc"], "base_sha256": "b" * 64,
                "was_running": True, **changes}

    return {"spec": spec, "dir": directory, "sent": sent, "rebased": rebased, "base": base}


def test_a_cold_move_ends_with_the_guest_defined_here_with_its_mac(driver, arrived,
                                                                   monkeypatch):
    defined = []
    monkeypatch.setattr(libvirt_cold_move, "domain_xml",
                        lambda spec: defined.append(spec) or domain.domain_xml(spec))
    assert driver.finish_incoming(arrived["spec"], arrived["sent"](), power_on=False) == \
        {"ip": None}
    assert arrived["rebased"] == [(arrived["dir"] / "disk.qcow2", arrived["base"])]
    # The test driver has no network (so no NIC): the MAC is in what was defined.
    assert defined[0].macs == ("52:54:00:aa:bb:cc",)
    assert defined[0].disk == arrived["dir"] / "disk.qcow2"
    assert arrived["spec"]["uuid"] in driver.list_instances()
    assert arrived["spec"]["uuid"] not in driver.running()


def test_a_cold_move_whose_files_did_not_all_arrive_is_refused(driver, arrived):
    moved = arrived["sent"]()
    (arrived["dir"] / "disk.qcow2").write_bytes(b"QFI\xfb cut short")
    with pytest.raises(BuildError, match="disk.qcow2: received .* do not match"):
        driver.finish_incoming(arrived["spec"], moved, power_on=True)
    assert arrived["spec"]["uuid"] not in driver.list_instances()


def test_a_cold_move_from_another_base_image_is_refused(driver, arrived):
    with pytest.raises(BuildError, match="base image differs"):
        driver.finish_incoming(arrived["spec"], arrived["sent"](base_sha256="c" * 64), True)
    assert arrived["rebased"] == []


def test_a_disk_that_is_no_plain_qcow2_overlay_is_refused(driver, arrived):
    (arrived["dir"] / "disk.qcow2").write_bytes(b"KDMV" + b"\0" * 4092)  # a VMDK
    with pytest.raises(RequestError, match="not a qcow2"):
        driver.finish_incoming(arrived["spec"], arrived["sent"](), True)
    data_file = bytearray(overlay("/elsewhere/base.qcow2"))
    data_file[0x48:0x50] = struct.pack(">Q", 4)  # incompatible feature: external data file
    (arrived["dir"] / "disk.qcow2").write_bytes(bytes(data_file))
    with pytest.raises(RequestError, match="refused"):
        driver.finish_incoming(arrived["spec"], arrived["sent"](), True)
    assert arrived["rebased"] == []

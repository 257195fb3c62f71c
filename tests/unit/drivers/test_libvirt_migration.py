"""drivers/libvirt_migration.py with libvirt's test driver (test:///default, in-process) for
the host's own side, and stand-ins for the peer's libvirtd and for the source domain's
migration (the test driver migrates nothing): what a destination prepares, what a source
refuses before anything moves, that a failed or cancelled move leaves one copy, running on
the source, what a cold move checks before defining the guest. Real guests between two
libvirtds over TLS: tests/virt/test_migration_vm.py."""

from __future__ import annotations

import hashlib
import json
import struct
import uuid as uuidlib
from pathlib import Path
from typing import Any

import libvirt
import pytest

from etcd_compute.config import COMPUTE_DEFAULTS, deep_merge
from etcd_compute.drivers import libvirt_migration
from etcd_compute.drivers.libvirt import LibvirtDriver
from etcd_compute.errors import BuildError, RequestError
from etcd_compute.virt import domain, images, qemu_img
from etcd_compute.virt.remote_files import Sent
from tests.support import make_spec

RP = "00000000-0000-0000-0000-0000000000aa"
PEER = "10.0.0.2"


@pytest.fixture
def config(tmp_path: Path) -> dict[str, Any]:
    return deep_merge(COMPUTE_DEFAULTS, {
        "compute": {"state_dir": str(tmp_path / "state"),
                    "instances_dir": str(tmp_path / "instances")},
        "driver": {"name": "libvirt", "libvirt": {
            "uri": "test:///default", "image_cache_dir": str(tmp_path / "images"),
            "migration": {"address": "10.0.0.1", "pki_dir": str(tmp_path / "pki")}}},
    })


@pytest.fixture
def driver(config: dict[str, Any]):
    driver = LibvirtDriver(config)
    yield driver
    for uuid in driver.list_instances():
        driver.destroy(uuid)
    driver.close()


@pytest.fixture
def image(tmp_path: Path) -> str:
    path = tmp_path / "image.qcow2"
    path.write_bytes(b"not downloaded with the test driver")
    return f"file://{path}"


def target(instance_dir: str, base: str | None = None) -> dict[str, Any]:
    return {"address": PEER, "instance_dir": instance_dir, "base_sha256": base,
            "dhcp_server": "192.168.123.1"}


# -- the destination ---------------------------------------------------------------------


def test_a_host_without_a_migration_address_takes_no_guests(config, image):
    config["driver"]["libvirt"]["migration"]["address"] = None
    with pytest.raises(BuildError, match="migration.address is not set"):
        LibvirtDriver(config).prepare_incoming(make_spec(RP, image))


def test_the_destination_makes_room_and_says_where(driver, config, image):
    spec = make_spec(RP, image, name="web")
    made = driver.prepare_incoming(spec)
    directory = Path(config["compute"]["instances_dir"]) / spec["uuid"]
    assert made == {"address": "10.0.0.1", "instance_dir": str(directory),
                    "base_sha256": None, "dhcp_server": "192.168.123.1"}
    assert json.loads((directory / "meta.json").read_text())["name"] == "web"
    assert spec["uuid"] not in driver.list_instances()  # no domain before it comes


def test_a_guest_already_here_is_not_prepared_for_again(driver, image):
    spec = make_spec(RP, image)
    driver.build(spec)
    with pytest.raises(BuildError, match="already has a domain"):
        driver.prepare_incoming(spec)


def test_a_failed_preparation_leaves_nothing(driver, config, tmp_path):
    spec = make_spec(RP, f"file://{tmp_path}/missing.qcow2")
    with pytest.raises(RequestError):
        driver.prepare_incoming(spec)
    assert not (Path(config["compute"]["instances_dir"]) / spec["uuid"]).exists()


def test_discarding_removes_what_was_prepared_but_never_a_running_guest(driver, config,
                                                                         image):
    spec = make_spec(RP, image)
    driver.prepare_incoming(spec)
    driver.discard_incoming(spec["uuid"])
    assert not (Path(config["compute"]["instances_dir"]) / spec["uuid"]).exists()
    driver.build(spec)
    with pytest.raises(BuildError, match="runs on this host"):
        driver.discard_incoming(spec["uuid"])
    assert spec["uuid"] in driver.running()


# -- the source: refusals before anything moves ----------------------------------------------


def test_a_bad_target_is_refused_before_anything_moves(driver, image):
    spec = make_spec(RP, image)
    driver.build(spec)
    for bad in ({"address": "x/y"}, {"instance_dir": "rel"}, {"unexpected": 1}):
        with pytest.raises(BuildError, match="bad target"):
            driver.live_migrate(spec["uuid"], {**target("/srv/i"), **bad})
        with pytest.raises(BuildError, match="bad target"):
            driver.send_stopped(spec["uuid"], {**target("/srv/i"), **bad})
    assert spec["uuid"] in driver.running()


def test_a_stopped_guest_does_not_move_live(driver, image):
    spec = make_spec(RP, image)
    driver.build({**spec, "stopped": True})
    with pytest.raises(BuildError, match="not running"):
        driver.live_migrate(spec["uuid"], target("/srv/i"))


def test_a_destination_on_another_base_image_is_refused(driver, image):
    spec = make_spec(RP, image)
    driver.build(spec)
    with pytest.raises(BuildError, match="base image differs"):
        driver.live_migrate(spec["uuid"], target("/srv/i", base="a" * 64))
    assert spec["uuid"] in driver.running()


def test_an_unreachable_peer_is_one_line(driver, image, monkeypatch):
    spec = make_spec(RP, image)
    driver.build(spec)
    with pytest.raises(BuildError, match=f"libvirtd of {PEER}:"):
        driver.live_migrate(spec["uuid"], target("/nonexistent"))
    assert spec["uuid"] in driver.running()


# -- the source: the move, with the migration itself stood in for -------------------------


class Domain:
    """The source guest: `outcome` is what migrateToURI3 does."""

    def __init__(self, uuid: str, directory: Path = Path("/x"), outcome: str = "moved"):
        self.uuid, self.directory, self.outcome, self.active = uuid, directory, outcome, True
        self.state_now, self.calls = libvirt.VIR_DOMAIN_RUNNING, []

    def name(self) -> str:
        return self.uuid

    def isActive(self) -> bool:  # noqa: N802 (libvirt's names)
        return self.active

    def state(self) -> list[int]:
        return [self.state_now, 0]

    def XMLDesc(self, flags: int) -> str:  # noqa: N802
        return (f"<domain><name>{self.uuid}</name><devices><disk type='file' device='disk'>"
                f"<source file='{self.directory}/disk.qcow2'/><target dev='vda'/></disk>"
                "</devices></domain>")

    def jobStats(self, flags: int = 0) -> dict[str, Any]:  # noqa: N802
        return {"type": libvirt.VIR_DOMAIN_JOB_NONE}

    def migrateToURI3(self, uri: str, params: dict[str, Any], flags: int) -> None:  # noqa: N802
        self.calls.append(("migrate", uri, params, flags))
        if self.outcome == "moved":
            self.active = False
            return
        if self.outcome == "moved-but-failed":
            self.active = False
        error = libvirt.libvirtError("stand-in")
        error.err = (libvirt.VIR_ERR_OPERATION_FAILED, 0, "Lost connection to destination host",
                     0, "", "", "", 0, 0)
        raise error

    def resume(self) -> None:
        self.calls.append(("resume",))

    def create(self) -> None:
        self.active = True
        self.calls.append(("create",))


class Peer:
    def __init__(self, there: Domain | None = None):
        self.there, self.closed = there, False

    def lookupByUUIDString(self, uuid: str) -> Domain:  # noqa: N802
        if self.there is None:
            raise libvirt.libvirtError("no domain")
        return self.there

    def close(self) -> None:
        self.closed = True


@pytest.fixture
def moving(driver, config, image, monkeypatch):
    """A built guest whose domain (as the driver sees it) and peer are stand-ins."""
    spec = make_spec(RP, image)
    driver.build(spec)
    uuid = spec["uuid"]
    directory = Path(config["compute"]["instances_dir"]) / uuid
    (directory / "disk.qcow2").write_bytes(overlay(None))
    sent: list[dict[str, Path]] = []
    state: dict[str, Any] = {"domain": Domain(uuid, directory), "peer": Peer()}
    monkeypatch.setattr(driver, "_domain", lambda _uuid: state["domain"])
    monkeypatch.setattr(driver, "_our_domain",
                        lambda asked: state["domain"] if asked == uuid else None)
    monkeypatch.setattr(driver, "_open_peer", lambda _target: state["peer"])
    monkeypatch.setattr(libvirt_migration, "send_files",
                        lambda peer, directory, files, pool_name: sent.append(files) or [
                            Sent(name, path.stat().st_size, "0" * 64)
                            for name, path in files.items()])
    state.update(uuid=uuid, sent=sent, spec=spec)
    return state


def test_a_live_move_sends_the_config_drive_migrates_and_leaves_nothing_here(driver, config,
                                                                            moving):
    uuid = moving["uuid"]
    done = Domain(uuid, outcome="n/a")
    moving["peer"].there = done
    done.jobStats = lambda flags=0: {"downtime": 42, "data_total": 10, "time_elapsed": 900}
    result = driver.live_migrate(uuid, target(f"/srv/{uuid}"))
    assert result["downtime_ms"] == 42 and result["elapsed_ms"] == 900
    assert [list(files) for files in moving["sent"]] == [["config.iso"],
                                                         ["console.history.log"]]
    (call,) = moving["domain"].calls
    assert call[1] == f"qemu+tls://{PEER}/system?pkipath={config['driver']['libvirt']['migration']['pki_dir']}"
    assert call[2][libvirt.VIR_MIGRATE_PARAM_MIGRATE_DISKS] == ["vda"]
    assert f"/srv/{uuid}/disk.qcow2" in call[2][libvirt.VIR_MIGRATE_PARAM_DEST_XML]
    assert not (Path(config["compute"]["instances_dir"]) / uuid).exists()
    assert moving["peer"].closed


def test_a_failed_live_move_leaves_the_guest_running_here_and_its_files(driver, config,
                                                                        moving):
    uuid = moving["uuid"]
    moving["domain"].outcome = "failed"
    with pytest.raises(BuildError, match="Lost connection.*the guest runs on here"):
        driver.live_migrate(uuid, target(f"/srv/{uuid}"))
    assert (Path(config["compute"]["instances_dir"]) / uuid).exists()
    assert moving["peer"].closed


def test_a_copy_the_destination_started_is_destroyed_when_the_source_runs(driver, moving):
    uuid = moving["uuid"]
    moving["domain"].outcome = "failed"
    there = Domain(uuid)
    there.destroy = lambda: setattr(there, "active", False)
    moving["peer"].there = there
    with pytest.raises(BuildError):
        driver.live_migrate(uuid, target(f"/srv/{uuid}"))
    assert not there.active and moving["domain"].active


def test_a_move_reported_failed_that_left_the_guest_running_only_there_is_a_move(driver,
                                                                                 moving):
    uuid = moving["uuid"]
    moving["domain"].outcome = "moved-but-failed"
    moving["peer"].there = Domain(uuid)
    assert "seconds" in driver.live_migrate(uuid, target(f"/srv/{uuid}"))


def test_a_cancel_stops_the_job_of_the_guest(driver, moving):
    aborted = []
    moving["domain"].abortJob = lambda: aborted.append(True)
    assert driver.abort_migration(moving["uuid"]) is True and aborted
    assert driver.abort_migration(str(uuidlib.uuid4())) is False


def test_progress_is_none_without_a_job_and_libvirt_s_figures_with_one(driver, moving):
    assert driver.migration_progress(moving["uuid"]) is None
    moving["domain"].jobStats = lambda flags=0: {
        "type": libvirt.VIR_DOMAIN_JOB_UNBOUNDED, "data_total": 100, "data_remaining": 25}
    assert driver.migration_progress(moving["uuid"])["percent"] == 75.0


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
    monkeypatch.setattr(libvirt_migration, "send_files", broken)
    with pytest.raises(BuildError, match="peer gone; the guest is running here as before"):
        driver.send_stopped(uuid, target(f"/srv/{uuid}"))
    assert moving["domain"].active and ("create",) in moving["domain"].calls


# -- the destination's end of a cold move ----------------------------------------------------


def overlay(backing: str | None) -> bytes:
    """A qcow2 header naming a backing file (at offset 0x200), or none."""
    name = (backing or "").encode()
    header = b"QFI\xfb" + struct.pack(">IQI", 3, 0x200 if name else 0, len(name)) + \
        struct.pack(">IQ", 16, 1 << 30)
    return header.ljust(0x200, b"\0") + name.ljust(4096 - 0x200, b"\0")


@pytest.fixture
def arrived(driver, config, tmp_path, monkeypatch):
    """A cold move's files as they arrived here, a base of the image in the cache."""
    url = f"file://{tmp_path}/image.qcow2"
    (tmp_path / "image.qcow2").write_bytes(b"the image")
    spec = make_spec(RP, url)
    driver.prepare_incoming(spec)
    directory = Path(config["compute"]["instances_dir"]) / spec["uuid"]
    (directory / "disk.qcow2").write_bytes(overlay("/elsewhere/images/base.qcow2"))
    (directory / "config.iso").write_bytes(b"cidata")
    cache = images.ImageCache(config["driver"]["libvirt"]["image_cache_dir"], 1 << 30)
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
    monkeypatch.setattr(libvirt_migration, "domain_xml",
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

"""Overlays on a base image, and the NoCloud config drive read back with pycdlib."""

from __future__ import annotations

import stat
import subprocess
from pathlib import Path

import pycdlib
import pytest
import yaml

from etcd_compute.errors import RequestError
from etcd_compute.virt import configdrive, disks, qemu_img
from etcd_compute.virt.instance_files import InstanceFiles, bases_in_use, hostname_for

GIB = 1024**3


def make_base(path: Path, size: str) -> Path:
    subprocess.run(["qemu-img", "create", "-q", "-f", "qcow2", str(path), size], check=True)
    return path


def test_the_overlay_is_exactly_the_claimed_disk(tmp_path: Path) -> None:
    base = make_base(tmp_path / "base.qcow2", "1G")
    large = tmp_path / "large.qcow2"
    assert disks.create_overlay(base, "qcow2", large, 5) == 5 * GIB
    info = qemu_img.info(large, "qcow2")
    assert info["virtual-size"] == 5 * GIB
    assert info["backing-filename"] == str(base)
    assert stat.S_IMODE(large.stat().st_mode) == 0o600  # tenant data: not for other users
    assert disks.backing_file(large) == base
    assert disks.backing_file(base) is None


def test_a_base_larger_than_the_claimed_disk_is_refused(tmp_path: Path) -> None:
    """A 200 KB qcow2 declaring 16 TiB once got a 16 TiB disk for a 1 GiB claim."""
    base = make_base(tmp_path / "base.qcow2", "16T")
    overlay = tmp_path / "overlay.qcow2"
    with pytest.raises(RequestError, match="16384 GiB is larger than the 1 GiB disk"):
        disks.create_overlay(base, "qcow2", overlay, 1)
    assert not overlay.exists()


def test_bases_in_use_reads_the_overlays(tmp_path: Path) -> None:
    base = make_base(tmp_path / "base.qcow2", "1G")
    files = InstanceFiles.of(tmp_path / "instances", "11111111-2222-3333-4444-555555555555")
    files.create()
    disks.create_overlay(base, "qcow2", files.disk, 1)
    assert bases_in_use(tmp_path / "instances") == {base}
    files.remove()
    assert bases_in_use(tmp_path / "instances") == set()


def test_config_drive_contents(tmp_path: Path) -> None:
    iso = tmp_path / "config.iso"
    key = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5 someone@example"
    configdrive.write_config_drive(iso, "abc-123", "my-host", "#cloud-config\nfoo: 1\n", key)
    assert stat.S_IMODE(iso.stat().st_mode) == 0o600  # user-data and key: tenant data
    files = configdrive.read_config_drive(iso)
    assert set(files) == {"meta-data", "user-data"}
    meta = yaml.safe_load(files["meta-data"])
    assert meta == {"instance-id": "abc-123", "local-hostname": "my-host", "public-keys": [key]}
    assert files["user-data"] == "#cloud-config\nfoo: 1\n"

    reader = pycdlib.PyCdlib()
    reader.open(str(iso))
    try:
        assert reader.pvd.volume_identifier.decode().strip() == "cidata"
        assert reader.has_rock_ridge() and reader.has_joliet()
    finally:
        reader.close()


def test_config_drive_without_key_or_user_data(tmp_path: Path) -> None:
    iso = tmp_path / "config.iso"
    configdrive.write_config_drive(iso, "abc", "h", None, None)
    files = configdrive.read_config_drive(iso)
    assert yaml.safe_load(files["meta-data"]) == {"instance-id": "abc", "local-hostname": "h"}
    assert files["user-data"] == ""


def test_hostname_from_instance_name() -> None:
    uuid = "11111111-2222-3333-4444-555555555555"
    assert hostname_for("Web Server #1", uuid) == "web-server-1"
    assert hostname_for("###", uuid) == "instance-11111111"
    assert hostname_for(None, uuid) == "instance-11111111"
    assert len(hostname_for("x" * 100, uuid)) == 63

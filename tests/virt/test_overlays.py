"""Overlays on a base image with the real qemu-img: exactly the claimed size, private, and
read back by the cache's in-use scan (disks.py's own decisions are in
tests/unit/virt/test_disks.py)."""

from __future__ import annotations

import stat
import subprocess
from pathlib import Path

import pytest

from etcd_compute.errors import RequestError
from etcd_compute.virt import disks, qemu_img
from etcd_compute.virt.instance_files import InstanceFiles, bases_in_use

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

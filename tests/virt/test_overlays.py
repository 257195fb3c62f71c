"""Overlays on a base image with the real qemu-img: exactly the claimed size, private, and
read back by the cache's in-use scan (disks.py's own decisions are in
tests/unit/virt/test_disks.py)."""

from __future__ import annotations

import stat
import subprocess
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
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


def test_converting_a_chain_stays_far_inside_the_address_space_cap(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A live snapshot's `qemu-img convert` was once killed by SIGABRT under the 1 GiB cap
    on a loaded host: each of its I/O threads got a glibc malloc arena reserving 64 MiB
    of address space. With a quarter of the cap, 8 conversions at once, about half of
    them aborted before the arenas were limited; none may now."""
    base = make_base(tmp_path / "base.qcow2", "256M")
    subprocess.run(["qemu-io", "-c", "write -P 0xab 0 48M", str(base)], check=True,
                   capture_output=True)
    delta = tmp_path / "delta.qcow2"
    qemu_img.create_overlay(base, "qcow2", delta, 256 * 1024**2)
    subprocess.run(["qemu-io", "-c", "write -P 0xcd 16M 16M", str(delta)], check=True,
                   capture_output=True)
    monkeypatch.setattr(qemu_img, "ADDRESS_SPACE_BYTES", qemu_img.ADDRESS_SPACE_BYTES // 4)
    targets = [tmp_path / f"flat{n}.qcow2" for n in range(8)]
    with ThreadPoolExecutor(len(targets)) as pool:
        failures = [repr(exc) for exc in pool.map(
            lambda target: _error_of(qemu_img.convert, delta, "qcow2", target), targets)
            if exc is not None]
    assert failures == []
    assert qemu_img.info(targets[0], "qcow2").get("backing-filename") is None


def _error_of(function: Callable[..., object], *args: object) -> BaseException | None:
    try:
        function(*args)
    except Exception as exc:
        return exc
    return None

"""disks.py: an overlay is exactly the claimed DISK_GB, a larger base is the request's fault,
a failed creation leaves no overlay; the backing file is read from the qcow2 header. With
qemu-img stood in for (the real one: tests/virt/test_overlays.py)."""

from __future__ import annotations

import struct
from pathlib import Path

import pytest

from etcd_compute.errors import BuildError, RequestError
from etcd_compute.virt import disks, qemu_img

GIB = 1024**3


class QemuImg:
    """`info` answers `virtual_size`; `create_overlay` writes the overlay, or fails."""

    def __init__(self, virtual_size: int, fail: BaseException | None = None):
        self.virtual_size, self.fail = virtual_size, fail
        self.created: list[tuple[Path, str, Path, int]] = []

    def info(self, path: Path, image_format: str) -> dict[str, int]:
        return {"virtual-size": self.virtual_size}

    def create_overlay(self, base: Path, base_format: str, overlay: Path, size: int) -> None:
        overlay.write_bytes(b"QFI\xfb half written")
        if self.fail:
            raise self.fail
        self.created.append((base, base_format, overlay, size))


@pytest.fixture
def stand_in(monkeypatch: pytest.MonkeyPatch):
    def install(virtual_size: int, fail: BaseException | None = None) -> QemuImg:
        fake = QemuImg(virtual_size, fail)
        monkeypatch.setattr(qemu_img, "info", fake.info)
        monkeypatch.setattr(qemu_img, "create_overlay", fake.create_overlay)
        return fake
    return install


@pytest.mark.parametrize("base_size", [1, GIB // 2, 3 * GIB])
def test_the_overlay_is_exactly_the_claimed_disk(tmp_path, stand_in, base_size):
    fake = stand_in(base_size)
    overlay = tmp_path / "disk.qcow2"
    assert disks.create_overlay(tmp_path / "base", "qcow2", overlay, 3) == 3 * GIB
    assert fake.created == [(tmp_path / "base", "qcow2", overlay, 3 * GIB)]


def test_a_base_larger_than_the_claim_is_refused_before_anything_is_created(tmp_path,
                                                                           stand_in):
    fake = stand_in(3 * GIB + 1)
    overlay = tmp_path / "disk.qcow2"
    with pytest.raises(RequestError) as caught:
        disks.create_overlay(tmp_path / "base", "qcow2", overlay, 3)
    assert str(caught.value) == ("image virtual size 3 GiB is larger than the 3 GiB disk "
                                 "the request claimed (DISK_GB)")
    assert not fake.created and not overlay.exists()


@pytest.mark.parametrize("fault", [BuildError("qemu-img create: No space left on device"),
                                   KeyboardInterrupt()])
def test_a_failed_creation_leaves_no_overlay(tmp_path, stand_in, fault):
    stand_in(GIB, fail=fault)
    overlay = tmp_path / "disk.qcow2"
    with pytest.raises(type(fault)):
        disks.create_overlay(tmp_path / "base", "qcow2", overlay, 1)
    assert not overlay.exists()


# -- the backing file, from the header ----------------------------------------------------


def qcow2_header(backing: bytes, offset: int = 512) -> bytes:
    """magic, version, backing file offset and length, then the name at that offset."""
    header = disks.QCOW2_MAGIC + struct.pack(">IQI", 3, offset if backing else 0, len(backing))
    return header.ljust(offset, b"\0") + backing


def test_the_backing_file_is_read_from_the_header(tmp_path):
    overlay = tmp_path / "disk.qcow2"
    overlay.write_bytes(qcow2_header(b"/var/lib/etcd-compute/images/abc.qcow2"))
    assert disks.backing_file(overlay) == Path("/var/lib/etcd-compute/images/abc.qcow2")


@pytest.mark.parametrize("content", [
    qcow2_header(b""),                      # a qcow2 without a backing file
    disks.QCOW2_MAGIC + struct.pack(">IQI", 3, 0, 16),  # a length but no offset
    b"QFI\xfb\0\0\0\3",                     # a header cut short
    b"\0" * 4096,                           # raw
    b"RAW!" + qcow2_header(b"/etc/passwd")[4:],  # raw bytes shaped like a header
    b"",
])
def test_no_backing_file_is_none(tmp_path, content):
    disk = tmp_path / "disk"
    disk.write_bytes(content)
    assert disks.backing_file(disk) is None


def test_a_missing_disk_has_no_backing_file(tmp_path):
    assert disks.backing_file(tmp_path / "gone.qcow2") is None

"""virt/snapshot.py against a stand-in domain and qemu-img: a live snapshot mirrors the
disk's top layer onto a delta on the same base, waits for the copy to catch up, cancels
it without pivoting (the guest stays on its disk), flattens the delta; a stopped guest's
disk is flattened as it is; every file made is gone after any failure. (The real guest:
the snapshot test under tests/virt.)"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import libvirt
import pytest

from etcd_compute.errors import BuildError
from etcd_compute.virt import disks, qemu_img, snapshot


class Domain:
    """A running domain whose block copy catches up after `steps` polls."""

    def __init__(self, steps: int = 2, refuse: bool = False, vanish: bool = False):
        self.steps, self.refuse, self.vanish = steps, refuse, vanish
        self.copies: list[tuple[str, str, Any, int]] = []
        self.aborts: list[tuple[str, int]] = []
        self.job = False
        self.polls = 0

    def blockCopy(self, disk: str, xml: str, params: Any, flags: int) -> None:  # noqa: N802
        if self.refuse:
            raise libvirt.libvirtError("Operation not supported: no block copy here")
        self.copies.append((disk, xml, params, flags))
        self.job = True

    def blockJobInfo(self, disk: str, flags: int) -> dict[str, int]:  # noqa: N802
        if not self.job:
            return {}
        self.polls += 1
        if self.vanish:
            self.job = False
            return {}
        return {"type": 2, "bandwidth": 0, "cur": min(self.polls, self.steps),
                "end": self.steps}

    def blockJobAbort(self, disk: str, flags: int) -> None:  # noqa: N802
        self.aborts.append((disk, flags))
        self.job = False


@pytest.fixture
def qemu(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> list[tuple[str, ...]]:
    calls: list[tuple[str, ...]] = []

    def create_overlay(base: Path, base_format: str, overlay: Path, size: int) -> None:
        calls.append(("create", str(base), str(overlay), str(size)))
        overlay.write_bytes(b"delta")

    def convert(source: Path, source_format: str, target: Path) -> None:
        calls.append(("convert", str(source), str(target)))
        target.write_bytes(b"flat " + source.read_bytes())

    monkeypatch.setattr(qemu_img, "create_overlay", create_overlay)
    monkeypatch.setattr(qemu_img, "convert", convert)
    monkeypatch.setattr(qemu_img, "virtual_size", lambda path, fmt: 1 << 30)
    monkeypatch.setattr(disks, "backing_file", lambda path: tmp_path / "base.qcow2")
    monkeypatch.setattr(snapshot, "POLL_SECONDS", 0.0)
    return calls


def test_a_running_guest_is_mirrored_onto_a_delta_then_flattened(tmp_path, qemu):
    disk, target = tmp_path / "disk.qcow2", tmp_path / "snap.qcow2"
    disk.write_bytes(b"disk")
    domain = Domain(steps=3)
    size = snapshot.flatten(disk, target, running=True, domain=domain, timeout=10)
    delta = tmp_path / "snap.qcow2.delta"
    assert qemu == [("create", str(tmp_path / "base.qcow2"), str(delta), str(1 << 30)),
                    ("convert", str(delta), str(target))]
    (device, xml, _params, flags), = domain.copies
    assert device == "vda" and f'<source file="{delta}"/>' in xml
    assert flags == (libvirt.VIR_DOMAIN_BLOCK_COPY_SHALLOW |
                     libvirt.VIR_DOMAIN_BLOCK_COPY_REUSE_EXT |
                     libvirt.VIR_DOMAIN_BLOCK_COPY_TRANSIENT_JOB)
    assert domain.polls >= 3  # waited until the copy caught up
    assert domain.aborts == [("vda", 0)]  # cancelled, never pivoted
    assert target.read_bytes() == b"flat delta" and size == len(b"flat delta")
    assert not delta.exists()


def test_a_stopped_guests_disk_is_flattened_as_it_is(tmp_path, qemu):
    disk, target = tmp_path / "disk.qcow2", tmp_path / "snap.qcow2"
    disk.write_bytes(b"disk")
    snapshot.flatten(disk, target, running=False, domain=None, timeout=10)
    assert qemu == [("convert", str(disk), str(target))]


@pytest.mark.parametrize(("domain", "fault"), [
    (Domain(refuse=True), "snapshot: block copy refused: Operation not supported"),
    (Domain(vanish=True), "snapshot: the block copy ended before it caught up"),
    (Domain(steps=10**9), "snapshot: the block copy did not catch up within 0 s"),
])
def test_a_failed_copy_leaves_no_file_and_no_job(tmp_path, qemu, domain, fault):
    disk, target = tmp_path / "disk.qcow2", tmp_path / "snap.qcow2"
    disk.write_bytes(b"disk")
    with pytest.raises(BuildError) as caught:
        snapshot.flatten(disk, target, running=True, domain=domain, timeout=0)
    assert str(caught.value).startswith(fault)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["disk.qcow2"]
    assert not domain.job


def test_a_job_a_killed_worker_left_is_cancelled_first(tmp_path, qemu):
    disk, target = tmp_path / "disk.qcow2", tmp_path / "snap.qcow2"
    disk.write_bytes(b"disk")
    domain = Domain(steps=1)
    domain.job = True  # left over
    snapshot.flatten(disk, target, running=True, domain=domain, timeout=10)
    assert domain.aborts[0] == ("vda", 0) and len(domain.copies) == 1


class Glance:
    def __init__(self, fail: Exception | None = None):
        self.fail = fail
        self.uploaded: dict[str, bytes] = {}
        self.deleted: list[str] = []

    def upload(self, image_id: str, data: Any, size: int | None = None) -> None:
        if self.fail:
            raise self.fail
        self.uploaded[image_id] = data.read()

    def delete(self, image_id: str) -> None:
        self.deleted.append(image_id)


def test_the_flattened_disk_is_uploaded_to_the_image_made_for_it(tmp_path):
    flat = tmp_path / "snap.qcow2"
    flat.write_bytes(b"QFI\xfb flat")
    glance = Glance()
    snapshot.upload(glance, "image-1", flat)
    assert glance.uploaded == {"image-1": b"QFI\xfb flat"} and glance.deleted == []


def test_a_failed_upload_leaves_no_half_image(tmp_path):
    from etcd_compute.errors import GlanceUnavailable

    flat = tmp_path / "snap.qcow2"
    flat.write_bytes(b"QFI\xfb flat")
    glance = Glance(GlanceUnavailable("Glance: PUT /v2/images/image-1/file: 503"))
    with pytest.raises(BuildError, match="upload to Glance image image-1 failed: Glance: PUT"):
        snapshot.upload(glance, "image-1", flat)
    assert glance.deleted == ["image-1"]

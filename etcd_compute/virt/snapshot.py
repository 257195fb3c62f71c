"""A snapshot of an instance's disk, flattened to a standalone qcow2.

A running guest is not stopped: as Nova's libvirt driver does for a live snapshot, a
new qcow2 "delta" on the same base image and of the same size is made, qemu mirrors the
guest's disk (its top layer: `VIR_DOMAIN_BLOCK_COPY_SHALLOW`, onto the delta that
already has the base: `REUSE_EXT`) into it while the guest runs, and once the mirror has
caught up the job is cancelled without pivoting: the guest stays on its own disk and the
delta holds the disk as it was at that moment, crash-consistent (what a power cut would
leave). Nova undefines a persistent domain for the copy; libvirt's
`VIR_DOMAIN_BLOCK_COPY_TRANSIENT_JOB` lets a persistent domain keep its definition. A
stopped guest's disk is read as it is. Either way `qemu-img convert` (under the usual
limits) flattens disk and base into one qcow2 with no backing file: the image uploaded.

`upload` sends the flattened disk to the Glance image the operator made for it (queued,
owned by the instance's project) with this host's service credential; if the upload
fails the image is deleted: no half image is left in Glance.

Every file made here is removed on any failure; a copy job left by a killed worker is
cancelled by the next snapshot of that guest.
"""

from __future__ import annotations

import contextlib
import logging
import time
from pathlib import Path
from typing import Any
from xml.sax.saxutils import quoteattr

import libvirt

from etcd_compute.errors import BuildError, EtcdComputeError
from etcd_compute.virt import disks, qemu_img

log = logging.getLogger(__name__)

DISK_TARGET = "vda"  # the one disk our domains have (virt/domain.py)
COPY_FLAGS = (libvirt.VIR_DOMAIN_BLOCK_COPY_SHALLOW | libvirt.VIR_DOMAIN_BLOCK_COPY_REUSE_EXT
              | libvirt.VIR_DOMAIN_BLOCK_COPY_TRANSIENT_JOB)
POLL_SECONDS = 0.2


def _reason(exc: libvirt.libvirtError) -> str:
    return (exc.get_error_message() or str(exc)).splitlines()[0]


def _cancel_copy(domain: libvirt.virDomain) -> None:
    with contextlib.suppress(libvirt.libvirtError):
        if domain.blockJobInfo(DISK_TARGET, 0):
            domain.blockJobAbort(DISK_TARGET, 0)


def mirror(domain: libvirt.virDomain, disk: Path, delta: Path, timeout: float) -> None:
    """Copy the running guest's `disk` (its top layer) into `delta` as of now."""
    base = disks.backing_file(disk)
    if base is None:
        raise BuildError(f"snapshot: {disk} has no base image")
    size = qemu_img.virtual_size(disk, "qcow2")
    qemu_img.create_overlay(base, "qcow2", delta, size)
    _cancel_copy(domain)  # a job a killed worker left
    destination = (f"<disk type='file'><driver type='qcow2'/>"
                   f"<source file={quoteattr(str(delta))}/></disk>")
    try:
        domain.blockCopy(DISK_TARGET, destination, None, COPY_FLAGS)
    except libvirt.libvirtError as exc:
        raise BuildError(f"snapshot: block copy refused: {_reason(exc)}") from None
    deadline = time.monotonic() + timeout
    try:
        while True:
            info = domain.blockJobInfo(DISK_TARGET, 0)
            if not info:
                raise BuildError("snapshot: the block copy ended before it caught up")
            if info["end"] and info["cur"] == info["end"]:
                break
            if time.monotonic() > deadline:
                raise BuildError(f"snapshot: the block copy did not catch up within "
                                 f"{timeout:g} s")
            time.sleep(POLL_SECONDS)
    finally:
        # Cancelled, not pivoted: the guest stays on its disk; the delta is the copy.
        _cancel_copy(domain)


def flatten(disk: Path, target: Path, running: bool, domain: libvirt.virDomain | None,
            timeout: float) -> int:
    """`target`: the instance's disk (and its base) as one standalone qcow2; a running
    guest's as of now, crash-consistent. Returns its size in bytes."""
    delta = target.with_name(target.name + ".delta")
    try:
        if running:
            assert domain is not None
            started = time.monotonic()
            mirror(domain, disk, delta, timeout)
            log.info("snapshot: %s mirrored in %.2f s", disk, time.monotonic() - started)
            qemu_img.convert(delta, "qcow2", target)
        else:
            qemu_img.convert(disk, "qcow2", target)
        return target.stat().st_size
    except BaseException:
        target.unlink(missing_ok=True)
        raise
    finally:
        delta.unlink(missing_ok=True)


def upload(glance: Any, image_id: str, path: Path) -> None:
    """`path` as the bytes of the queued Glance image `image_id`; on any failure the image
    is deleted (best effort) and BuildError says why."""
    try:
        with path.open("rb") as handle:
            glance.upload(image_id, handle, size=path.stat().st_size)
    except BaseException as exc:
        with contextlib.suppress(Exception):
            glance.delete(image_id)
        if isinstance(exc, (EtcdComputeError, OSError)):
            raise BuildError(f"snapshot: upload to Glance image {image_id} failed: "
                             f"{exc}") from None
        raise

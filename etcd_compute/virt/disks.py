"""Per-instance disks: a qcow2 overlay on a cached base image.

The overlay holds only what the guest writes, so many instances share one
base. It is exactly the instance's DISK_GB: what the request claimed in
Placement. A base whose virtual size is larger is refused (the request's
fault): a disk is never silently grown past its claim.
"""

from __future__ import annotations

import struct
from pathlib import Path

from etcd_compute.errors import RequestError
from etcd_compute.virt import qemu_img

GIB = 1024**3
QCOW2_MAGIC = b"QFI\xfb"


def create_overlay(base: Path, base_format: str, overlay: Path, disk_gb: int) -> int:
    """Create `overlay` (0600) backed by `base`; return its virtual size in bytes."""
    size = disk_gb * GIB
    base_size = int(qemu_img.info(base, base_format)["virtual-size"])
    if base_size > size:
        raise RequestError(f"image virtual size {base_size / GIB:g} GiB is larger than the "
                           f"{disk_gb} GiB disk the request claimed (DISK_GB)")
    try:
        qemu_img.create_overlay(base, base_format, overlay, size)
    except BaseException:
        overlay.unlink(missing_ok=True)
        raise
    return size


def backing_file(overlay: Path) -> Path | None:
    """The backing file named in a qcow2 header (read directly: no subprocess per disk)."""
    try:
        with overlay.open("rb") as handle:
            header = handle.read(20)
            if len(header) < 20 or header[:4] != QCOW2_MAGIC:
                return None
            offset, length = struct.unpack(">QI", header[8:20])
            if not offset or not length:
                return None
            handle.seek(offset)
            return Path(handle.read(length).decode())
    except OSError:
        return None

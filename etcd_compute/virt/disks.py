"""Per-instance disks: a qcow2 overlay on a cached base image.

The overlay holds only what the guest writes, so many instances share one
base. It is created at the instance's DISK_GB, or at the base's own virtual
size when that is larger (a disk is never smaller than its image).
"""

from __future__ import annotations

import struct
import subprocess
from pathlib import Path

from etcd_compute.errors import BuildError
from etcd_compute.virt.images import qemu_img_info

GIB = 1024**3
QCOW2_MAGIC = b"QFI\xfb"


def create_overlay(base: Path, base_format: str, overlay: Path, disk_gb: int) -> int:
    """Create `overlay` backed by `base`; return its virtual size in bytes."""
    base_size = int(qemu_img_info(base, base_format)["virtual-size"])
    size = max(disk_gb * GIB, base_size)
    result = subprocess.run(
        ["qemu-img", "create", "-q", "-f", "qcow2", "-F", base_format,
         "-b", str(base), str(overlay), str(size)],
        capture_output=True,
        text=True,
        check=False,
    )
    if result.returncode != 0:
        overlay.unlink(missing_ok=True)
        reason = (result.stderr.strip().splitlines() or ["failed"])[-1]
        raise BuildError(f"qemu-img create: {reason}")
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

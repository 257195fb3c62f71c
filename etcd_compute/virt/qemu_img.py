"""qemu-img, run the way Nova runs it on untrusted images (OSSA-2024-001).

Every call names the image format explicitly (`-f`): qemu-img never probes,
so a file can never be taken for a format that reads other host files
(a VMDK descriptor, a qcow2 data-file). Every call runs under resource
limits set in the child by util-linux (`prlimit`: address space and CPU time,
as Nova's qemu_img_info does), with a parent-death signal (`setpriv
--pdeathsig KILL`): a worker killed for its timeout takes its qemu-img with
it. Files qemu-img creates are private (umask 077).
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path
from typing import Any

from etcd_compute.errors import BuildError, RequestError

GIB = 1024**3
# Nova's QEMU_IMG_LIMITS: 1 GiB of address space, 30 s of CPU. Measured here
# (qemu-img 7.2): `info` runs within 128 MiB; `convert` of a 1 GiB raw image
# ran within 512 MiB and failed at 256 MiB (its coroutine stacks).
ADDRESS_SPACE_BYTES = 1 * GIB
INFO_CPU_SECONDS = 30
# A conversion reads the whole image, so its CPU time grows with it: 3.5 s for
# 1 GiB of random data here. The job timeout bounds its wall time.
CONVERT_CPU_SECONDS = 600
FORMATS = ("raw", "qcow2")
# glibc gives each thread its own malloc arena, reserving 64 MiB of address space apiece:
# a convert's I/O threads on a loaded host reached the cap and qemu-img aborted (SIGABRT).
# One arena keeps a convert's address space near what it uses (a quarter of the cap
# holds 8 at once, tests/virt/test_overlays.py).
CHILD_ENVIRONMENT = {"MALLOC_ARENA_MAX": "1"}


def limited(command: list[str], cpu_seconds: int) -> list[str]:
    """`command` wrapped so the child dies with its parent and runs under rlimits."""
    return [
        "setpriv", "--pdeathsig", "KILL", "--",
        "prlimit", f"--as={ADDRESS_SPACE_BYTES}", f"--cpu={cpu_seconds}", "--",
        *command,
    ]


def run(args: list[str], cpu_seconds: int = INFO_CPU_SECONDS) -> subprocess.CompletedProcess[str]:
    """`qemu-img ARGS` under the limits; BuildError with its last stderr line if it fails."""
    result = subprocess.run(
        limited(["qemu-img", *args], cpu_seconds),
        capture_output=True, text=True, check=False, umask=0o077,
        env={**os.environ, **CHILD_ENVIRONMENT},
    )
    if result.returncode != 0:
        reason = (result.stderr.strip().splitlines() or [f"exit status {result.returncode}"])[-1]
        if result.returncode < 0:
            reason = f"killed by signal {-result.returncode} (resource limit)"
        raise BuildError(f"qemu-img {args[0]}: {reason}")
    return result


def _format(image_format: str) -> str:
    if image_format not in FORMATS:
        raise ValueError(f"qemu-img: format {image_format!r} is not one we run qemu-img on")
    return image_format


def info(path: Path, image_format: str) -> dict[str, Any]:
    """`qemu-img info` of `path`, read as `image_format` (never probed)."""
    result = run(["info", "--output=json", "-f", _format(image_format), str(path)])
    return json.loads(result.stdout)


def check_standalone(path: Path, image_format: str, what: str) -> dict[str, Any]:
    """qemu-img's own view agrees: `image_format`, no backing file, no external data file.

    The format inspector has checked this already; this is the second opinion
    Nova also asks for before using an image.
    """
    details = info(path, image_format)
    if details.get("format") != image_format:
        raise RequestError(f"{what}: qemu-img reads it as {details.get('format')!r}, "
                           f"not {image_format}")
    if details.get("backing-filename"):
        raise RequestError(f"{what}: images with a backing file are refused")
    specific = (details.get("format-specific") or {}).get("data") or {}
    if specific.get("data-file"):
        raise RequestError(f"{what}: qcow2 images with an external data file are refused")
    return details


def convert(source: Path, source_format: str, target: Path) -> None:
    """Convert `source` to a qcow2 `target`."""
    run(["convert", "-q", "-f", _format(source_format), "-O", "qcow2", str(source), str(target)],
        cpu_seconds=CONVERT_CPU_SECONDS)


def create_overlay(base: Path, base_format: str, overlay: Path, size: int) -> None:
    """A qcow2 `overlay` of `size` bytes backed by `base`."""
    run(["create", "-q", "-f", "qcow2", "-F", _format(base_format), "-b", str(base),
         str(overlay), str(size)])


def rebase_unsafe(path: Path, base: Path, base_format: str) -> None:
    """Point the qcow2 overlay `path` at `base` without reading either (`-u`): for an
    overlay whose base, byte for byte the same image, is at another path here."""
    run(["rebase", "-q", "-u", "-f", "qcow2", "-F", _format(base_format), "-b", str(base),
         str(path)])


def grow(path: Path, image_format: str, size: int) -> None:
    """Make the disk `path` `size` bytes (never smaller: qemu-img refuses to shrink
    without --shrink)."""
    run(["resize", "-q", "-f", _format(image_format), str(path), str(size)])


def virtual_size(path: Path, image_format: str) -> int:
    """The disk's size as the guest sees it; readable while a guest runs from it (`-U`:
    qemu-img does not take the image lock the running qemu holds)."""
    result = run(["info", "-U", "--output=json", "-f", _format(image_format), str(path)])
    return int(json.loads(result.stdout)["virtual-size"])

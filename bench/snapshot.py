#!/usr/bin/env python3
"""Snapshots (issue 19): the time to snapshot a guest with a 1 GiB disk into Glance.

    .venv/bin/python bench/snapshot.py            # ~3 min: writes bench/results/snapshot.json
    .venv/bin/python bench/snapshot.py --rounds 1 --size-mib 256   # a quick look

Starts Keystone and Glance (TLS, SQLite, a file store) as `make up` does, makes a qcow2
base of `--size-mib` MiB of random bytes (nothing to compress or skip) and, as the
libvirt driver lays out an instance, a qcow2 overlay on it for a guest under TCG (the
offline test guest's kernel is not needed: the guest boots nothing, it only has to run
so that qemu owns the disk). Then, in turns, `rounds` times each:

- live: the guest running, `virt/snapshot.flatten` (a shallow block copy onto a delta,
  cancelled once caught up; then qemu-img convert of delta and base into one qcow2) and
  `virt/snapshot.upload` into a queued Glance image, as the compute's snapshot does;
- stopped: the same guest powered off, flatten (qemu-img convert of the disk) and upload;
- the floor: the upload alone of those flattened bytes, made beforehand (what any
  snapshot of this disk must send).

Every image is checked active in Glance with the bytes' sha512 and deleted afterwards.
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import os
import signal
import subprocess
import sys
import tempfile
import time
import uuid as uuidlib
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

import libvirt  # noqa: E402

from bench.services import save_results, say  # noqa: E402
from bench.stats import percentile  # noqa: E402
from etcd_compute.glance import GlanceClient  # noqa: E402
from etcd_compute.pki import Pki  # noqa: E402
from etcd_compute.virt import qemu_img, snapshot  # noqa: E402
from tools.local_services import cloud, ensure_libvirtd, stop_pid  # noqa: E402

MIB = 1024**2
RESULTS = REPO / "bench" / "results" / "snapshot.json"
# qemu (libvirt-qemu) must reach the disks: not under a 0700 temporary directory.
ROOT = Path("/var/tmp/etcd-compute-bench-snapshot")


def random_qcow2(path: Path, size_mib: int) -> None:
    raw = path.with_suffix(".raw")
    with raw.open("wb") as handle:
        for _ in range(size_mib):
            handle.write(os.urandom(MIB))
    subprocess.run(["qemu-img", "convert", "-q", "-f", "raw", "-O", "qcow2", str(raw),
                    str(path)], check=True)
    raw.unlink()


def domain_xml(name: str, disk: Path) -> str:
    return (f"<domain type='qemu'><name>{name}</name><memory unit='MiB'>64</memory>"
            "<vcpu>1</vcpu><os><type arch='x86_64'>hvm</type></os><devices>"
            "<disk type='file' device='disk'><driver name='qemu' type='qcow2'/>"
            f"<source file='{disk}'/><target dev='vda' bus='virtio'/></disk>"
            "</devices></domain>")


def timed(function: Any) -> float:
    started = time.perf_counter()
    function()
    return time.perf_counter() - started


def run(args: argparse.Namespace, work: Path) -> dict[str, Any]:
    pki = Pki(work / "pki")
    pki.init("etcd-compute-bench-snapshot")
    say("starting Keystone and Glance (TLS, SQLite)")
    keystone, glance = cloud.start(work / "cloud", pki)
    libvirt_pids = ensure_libvirtd(work / "libvirt")  # ours to stop, if it was not running
    connection = libvirt.open("qemu:///system")
    ROOT.mkdir(mode=0o711, exist_ok=True)
    disks = Path(tempfile.mkdtemp(prefix="run-", dir=ROOT))
    disks.chmod(0o711)
    domain = None
    try:
        client = GlanceClient(cloud.glance_config(keystone, glance))
        base, disk = disks / "base.qcow2", disks / "disk.qcow2"
        say(f"making a {args.size_mib} MiB base of random bytes and an instance disk on it")
        random_qcow2(base, args.size_mib)
        qemu_img.create_overlay(base, "qcow2", disk, 2 * args.size_mib * MIB)
        domain = connection.defineXML(domain_xml(f"bench-snapshot-{uuidlib.uuid4().hex[:8]}",
                                                 disk))
        times: dict[str, list[float]] = {"live": [], "stopped": [], "floor": []}
        flatten_times: dict[str, list[float]] = {"live": [], "stopped": [], "floor": []}
        sizes: list[int] = []

        def into_glance(kind: str, make: Any, untimed: Any = None) -> None:
            target = disks / f"{kind}.qcow2"
            image = client.create(f"bench-{kind}", "qcow2", visibility="private")
            try:
                if untimed is not None:
                    untimed(target)
                started = time.perf_counter()
                make(target)
                flatten_times[kind].append(time.perf_counter() - started)
                snapshot.upload(client, image["id"], target)
                times[kind].append(time.perf_counter() - started)
                uploaded = client.get(image["id"])
                digest = hashlib.sha512(target.read_bytes()).hexdigest()
                assert uploaded["status"] == "active" and \
                    uploaded["os_hash_value"] == digest, uploaded
                sizes.append(target.stat().st_size)
            finally:
                target.unlink(missing_ok=True)
                with contextlib.suppress(Exception):
                    client.delete(image["id"])

        for number in range(args.rounds):
            domain.create()
            into_glance("live", lambda target: snapshot.flatten(disk, target, True, domain,
                                                                timeout=600))
            domain.destroy()
            into_glance("stopped", lambda target: snapshot.flatten(disk, target, False, None,
                                                                   timeout=600))
            into_glance("floor", lambda target: None,
                        untimed=lambda target: qemu_img.convert(disk, "qcow2", target))
            say(f"round {number + 1}: " + ", ".join(
                f"{kind} {values[-1]:.2f} s" for kind, values in times.items()))
        return {"settings": {"rounds": args.rounds, "size_mib": args.size_mib},
                "seconds": times, "flatten_seconds": flatten_times,
                "image_bytes": max(sizes)}
    finally:
        if domain is not None:
            with contextlib.suppress(libvirt.libvirtError):
                if domain.isActive():
                    domain.destroy()
            with contextlib.suppress(libvirt.libvirtError):
                domain.undefine()
        connection.close()
        for path in disks.iterdir():
            path.unlink()
        disks.rmdir()
        with contextlib.suppress(OSError):
            ROOT.rmdir()
        glance.stop()
        keystone.stop()
        for pid in reversed(libvirt_pids):
            stop_pid(pid)


def markdown(results: dict[str, Any]) -> list[str]:
    """The section bench/REPORT.md gets (bench/report.py adds it when snapshot.json exists)."""
    floor = percentile(results["seconds"]["floor"], 50)
    lines = [
        "## Snapshots into Glance (issue 19)",
        "",
        f"Generated by `bench/snapshot.py` ({results['date']}, "
        f"{results['duration_seconds']:.0f} s; load after `{results['load_after']}`). A "
        f"guest under TCG with a disk of {results['settings']['size_mib']} MiB of random "
        "bytes (a qcow2 overlay on its base, as the driver lays it out), snapshotted into a "
        "Glance image (TLS, the `etcd-compute` service user) "
        f"{results['settings']['rounds']} times each, in turns; every image checked active "
        f"with the bytes' sha512 ({results['image_bytes'] / MIB:.0f} MiB uploaded each).",
        "",
        "| snapshot | flatten p50 s | flatten + upload p50 s (max) | x floor |",
        "|---|---|---|---|",
    ]
    names = {"live": "live (guest running: block copy, convert, upload)",
             "stopped": "stopped guest (convert, upload)",
             "floor": "floor: the upload alone"}
    for kind, label in names.items():
        values = results["seconds"][kind]
        lines.append(f"| {label} | {percentile(results['flatten_seconds'][kind], 50):.2f} | "
                     f"{percentile(values, 50):.2f} ({max(values):.2f}) | "
                     f"{percentile(values, 50) / floor:.2f} |")
    live = percentile(results["seconds"]["live"], 50)
    return lines + [
        "",
        f"A live snapshot of the {results['image_bytes'] / MIB:.0f} MiB disk took "
        f"{live:.1f} s at the median, {live / floor:.2f}x the upload of the same bytes "
        "alone: the upload into Glance (TLS, Glance's own format inspection, md5 and "
        "sha512 as it stores) is nearly all of it. The block copy itself moves only the "
        "guest's top layer (what it wrote since boot) and is cancelled once caught up, so "
        "the guest never stops; flattening copy and base into one qcow2 "
        f"({percentile(results['flatten_seconds']['live'], 50):.1f} s live, "
        f"{percentile(results['flatten_seconds']['stopped'], 50):.1f} s stopped) is "
        "local disk work. On this shared 2-core machine single runs vary by 2x (see the "
        "maxima): compare within a run only.",
    ]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3, help="snapshots of each kind")
    parser.add_argument("--size-mib", type=int, default=1024, help="the disk's data")
    args = parser.parse_args(argv)
    signal.signal(signal.SIGTERM, lambda signum, _frame: sys.exit(128 + signum))
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="etcd-compute-bench-snapshot-") as work:
        results = run(args, Path(work))
    save_results(RESULTS, results, started)
    for line in markdown(results)[4:]:
        print(line)
    return 0


if __name__ == "__main__":
    sys.exit(main())

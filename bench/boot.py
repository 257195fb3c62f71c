"""Boot overhead: schedule -> ACTIVE with IP, versus raw libvirt createXML -> DHCP lease.

Both boot the offline test guest (tools/build-test-guest.sh) under TCG
(`domain_type: qemu`) with the XML our driver generates (`domain_xml`), on a
NAT network of the benchmark's own. Ours: `select_destinations` -> the
compute daemon's watch -> image cache -> overlay + config drive -> define
+ start -> the driver sees the lease -> record ACTIVE, timed until the
record says ACTIVE with an IP (polled every 50 ms). Raw: disk and config
drive prepared beforehand (not timed), `createXML`, then the lease polled
every 50 ms. One untimed warm-up boot of ours fills the image cache and
creates the network; then raw and ours alternate, `runs` of each.
"""

from __future__ import annotations

import contextlib
import shutil
import subprocess
import time
import uuid as uuidlib
from pathlib import Path
from typing import Any

from bench import stats
from bench.services import ComputeProcess, Stack, say
from tools.local_services import REPO, ensure_libvirtd, free_port, stop_pid

BOOT_ROOT = Path("/var/tmp/etcd-compute-bench")
NETWORK = "etcd-compute-bench"
NETWORK_CIDR = "192.168.127.0/24"
QUERY = "resources=VCPU:1,MEMORY_MB:128,DISK_GB:1"
POLL = 0.05
BOOT_TIMEOUT = 180.0


class Skip(Exception):
    """The boot benchmark cannot run here; the reason goes in the report."""


def _guest_image() -> Path:
    if shutil.which("qemu-system-x86_64") is None:
        raise Skip("qemu-system-x86_64 is not installed")
    result = subprocess.run(["bash", str(REPO / "tools" / "build-test-guest.sh")],
                            capture_output=True, text=True, timeout=900, check=False)
    lines = result.stdout.strip().splitlines()
    if result.returncode or not lines or not Path(lines[-1]).is_file():
        raise Skip(f"tools/build-test-guest.sh failed: {result.stderr.strip()[-300:]}")
    return Path(lines[-1])


def _compute_config(stack: Stack, root: Path) -> dict[str, Any]:
    mdserver_conf = root / "mdserver.conf"
    # Loopback and a free port: the one metadata server on 169.254.169.254:80 may be a
    # test run's; the guest's DHCP lease (what we time) does not need ours.
    mdserver_conf.write_text(
        "[mdserver]\nbind_address = 127.0.0.1\n"
        f"port = {free_port()}\ninstances_dir = {root / 'instances'}\n"
        f"libvirt_uri = qemu:///system\nnetwork = {NETWORK}\n"
        f"log_file = {root / 'mdserver.log'}\n")
    return {
        "etcd": stack.etcd_config,
        "placement": stack.placement_config,
        "logging": {"level": "INFO"},
        "compute": {"name": "bench-boot", "uuid": "00000000-0000-0000-0000-0000000b0070",
                    "state_dir": str(root / "state"), "instances_dir": str(root / "instances"),
                    "workers": 2},
        "driver": {"name": "libvirt", "libvirt": {
            "uri": "qemu:///system", "domain_type": "qemu", "network": NETWORK,
            "network_cidr": NETWORK_CIDR, "image_cache_dir": str(root / "images"),
            "image_file_dirs": [str(root)],
            "boot_timeout_seconds": int(BOOT_TIMEOUT), "mdserver_config": str(mdserver_conf)}},
    }


def _boot_ours(scheduler: Any, image_url: str) -> tuple[float, str]:
    from etcd_compute.ops.operations import read_record
    from etcd_compute.scheduler import RequestSpec

    started = time.perf_counter()
    (destination,) = scheduler.select_destinations(RequestSpec.build(QUERY, image_url=image_url))
    while time.perf_counter() - started < BOOT_TIMEOUT:
        record = read_record(scheduler.store, destination.uuid)
        if record and record["state"] == "ERROR":
            raise RuntimeError(f"boot of {destination.uuid} failed: {record.get('error')}")
        if record and record["state"] == "ACTIVE" and record.get("ip"):
            return time.perf_counter() - started, destination.uuid
        time.sleep(POLL)
    raise RuntimeError(f"{destination.uuid} not ACTIVE within {BOOT_TIMEOUT:.0f} s")


def _destroy_ours(scheduler: Any, uuid: str) -> None:
    from etcd_compute.ops.operations import destroy, read_record

    destroy(scheduler.store, scheduler.placement, uuid)
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        record = read_record(scheduler.store, uuid)
        if record is None or record["state"] == "DELETED":
            return
        time.sleep(0.2)
    raise RuntimeError(f"{uuid} not DELETED within 120 s")


def _boot_raw(connection: Any, base: Path, root: Path) -> float:
    import libvirt

    from etcd_compute.virt import configdrive, disks, network
    from etcd_compute.virt.domain import DomainSpec, domain_xml, mac_addresses

    uuid = str(uuidlib.uuid4())
    directory = root / "raw" / uuid
    directory.mkdir(parents=True, mode=0o755)
    disk, drive = directory / "disk.qcow2", directory / "config.iso"
    disks.create_overlay(base, "qcow2", disk, 1)
    configdrive.write_config_drive(drive, uuid, f"raw-{uuid[:8]}", None, None)
    xml = domain_xml(DomainSpec(uuid=uuid, name=f"raw-{uuid[:8]}", memory_mb=128, vcpus=1,
                                domain_type="qemu", disk=disk, config_drive=drive,
                                console_log=directory / "console.log", network=NETWORK))
    net = connection.networkLookupByName(NETWORK)
    started = time.perf_counter()
    domain = connection.createXML(xml, 0)
    try:
        mac = mac_addresses(domain, NETWORK)[0]
        while time.perf_counter() - started < BOOT_TIMEOUT:
            if network.lease_ip(net, mac):
                return time.perf_counter() - started
            time.sleep(POLL)
        raise RuntimeError(f"raw guest {uuid} got no lease within {BOOT_TIMEOUT:.0f} s")
    finally:
        with contextlib.suppress(libvirt.libvirtError):
            domain.destroy()
        shutil.rmtree(directory, ignore_errors=True)


def run_boot(run_dir: Path, runs: int) -> dict[str, Any]:
    """{"ours_s": [...], "raw_s": [...], ratios} or {"skipped": reason}; never silent."""
    if runs <= 0:
        say("boot overhead: SKIPPED (--boot-runs 0)")
        return {"skipped": "--boot-runs 0"}
    try:
        import libvirt
    except ImportError:
        say("boot overhead: SKIPPED (python libvirt bindings missing)")
        return {"skipped": "python libvirt bindings missing"}
    libvirt.registerErrorHandler(lambda *_: None, None)
    try:
        image = _guest_image()
        libvirt_pids = ensure_libvirtd(run_dir)
    except Exception as exc:  # Skip, ServiceUnavailable, a failed build
        say(f"boot overhead: SKIPPED ({exc})")
        return {"skipped": str(exc)}
    BOOT_ROOT.mkdir(parents=True, exist_ok=True)
    BOOT_ROOT.chmod(0o755)
    root = BOOT_ROOT / uuidlib.uuid4().hex[:8]
    root.mkdir(mode=0o755)
    base = root / "guest.qcow2"
    shutil.copyfile(image, base)
    base.chmod(0o644)
    stack = Stack("sqlite", run_dir)
    compute: ComputeProcess | None = None
    config: dict[str, Any] | None = None
    connection = None
    out: dict[str, Any] = {"runs": runs, "ours_s": [], "raw_s": []}
    try:
        stack.start()
        config = _compute_config(stack, root)
        compute = ComputeProcess("compute-boot", run_dir, config).start(timeout=120)
        from etcd_compute.scheduler import Scheduler

        scheduler = Scheduler(stack.schedule_config())
        connection = libvirt.open("qemu:///system")
        image_url = f"file://{base}"
        say("boot overhead: warm-up boot (image cache, network; not timed)")
        seconds, uuid = _boot_ours(scheduler, image_url)
        out["warmup_s"] = seconds
        _destroy_ours(scheduler, uuid)
        for run in range(runs):
            out["raw_s"].append(_boot_raw(connection, base, root))
            seconds, uuid = _boot_ours(scheduler, image_url)
            out["ours_s"].append(seconds)
            _destroy_ours(scheduler, uuid)
            say(f"boot overhead: run {run + 1}/{runs}: raw {out['raw_s'][-1]:.2f} s, "
                f"ours {seconds:.2f} s")
        scheduler.close()
        for name in ("ours", "raw"):
            values = out[f"{name}_s"]
            out[f"{name}_median_s"] = stats.percentile(values, 50)
            out[f"{name}_mean_s"] = sum(values) / len(values)
        out["ratio_median"] = out["ours_median_s"] / out["raw_median_s"]
        out["ratio_mean"] = out["ours_mean_s"] / out["raw_mean_s"]
    finally:
        if compute is not None:
            compute.stop()
        if config is not None:
            from etcd_compute.mdserver.supervisor import stop_mdserver

            with contextlib.suppress(Exception):
                stop_mdserver(config)
        if connection is not None:
            _remove_network(connection)
            connection.close()
        stack.stop()
        for pid in reversed(libvirt_pids):  # libvirtd, then virtlogd
            stop_pid(pid)
        shutil.rmtree(root, ignore_errors=True)
        with contextlib.suppress(OSError):
            BOOT_ROOT.rmdir()  # only when no other run is using it
    return out


def _remove_network(connection: Any) -> None:
    import libvirt

    with contextlib.suppress(libvirt.libvirtError):
        net = connection.networkLookupByName(NETWORK)
        if net.isActive():
            net.destroy()
        net.undefine()

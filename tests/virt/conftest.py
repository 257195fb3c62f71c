"""Fixtures for the libvirt driver tests.

Fast tests use local files or an HTTP server on 127.0.0.1 (the driver against
libvirt's test driver is in tests/unit/drivers/test_libvirt.py). Tests marked `vm`
boot the tiny test guest (tools/build-test-guest.sh) under qemu:///system with
TCG: they start
libvirtd/virtlogd if they are not running (and stop them, by pid, after the
package), use their own NAT network and metadata server, and remove both after;
one run (or xdist worker) at a time on a machine, under host_lock("guests").
With CI=true anything missing fails the run instead of skipping.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import uuid as uuidlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import libvirt
import pytest

from etcd_compute.config import deep_merge
from etcd_compute.defaults import COMPUTE_DEFAULTS
from etcd_compute.errors import ServiceUnavailable
from etcd_compute.mdserver.supervisor import ensure_mdserver, stop_mdserver
from etcd_compute.virt import nwfilter
from tests.support import REPO, make_spec, timeout_paused, unavailable
from tools.local_services import ensure_libvirtd, host_lock, stop_pid
from tools.local_services.hypervisors import ComputeHosts

# qemu runs as libvirt-qemu and must traverse to the disks: not under a 0700 pytest tmp dir.
VM_TEST_ROOT = Path("/var/tmp/etcd-compute-vm-tests")
TEST_NETWORK = "etcd-compute-test"
TEST_NETWORK_CIDR = "192.168.124.0/24"
# Where tools/build-test-guest.sh keeps the test guest: a directory file:// images may
# come from in the VM tests (as the demo allows its own).
GUEST_CACHE = Path(os.environ.get("ETCD_COMPUTE_GUEST_CACHE",
                                  Path.home() / ".cache" / "etcd-compute" / "test-guest"))


def new_uuid() -> str:
    return str(uuidlib.uuid4())


def guest_spec(uuid: str, image_url: str, **overrides: Any) -> dict[str, Any]:
    """A spec for a real guest: the shared `make_spec` with a name, user-data and key of its own."""
    return make_spec(
        "00000000-0000-0000-0000-0000000000aa", image_url, uuid=uuid,
        name=f"guest-{uuid[:8]}",
        resources={"VCPU": 1, "MEMORY_MB": 128, "DISK_GB": 1},
        user_data=f"user-data-of-{uuid}\nsecond line",
        ssh_key=f"ssh-ed25519 AAAAC3NzaC1lZDI1NTE5 key-of-{uuid}",
        **overrides,
    )


# ----------------------------------------------------------------- real VMs


@pytest.fixture(scope="package")
def system_libvirt(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    """The machine's libvirtd (and virtlogd, which writes console logs), started here if
    missing, for the guests' tests of this package; stopped, by pid, after them.

    One run at a time on a machine holds it with the metadata address (169.254.169.254:80),
    the network etcd-compute-test and our nwfilters: a second test run (or worker) waits for
    the lock, and only then looks for the daemons (the holder before may have stopped the
    ones it started).
    """
    libvirt.registerErrorHandler(lambda _context, _error: None, None)
    with contextlib.ExitStack() as held:
        try:
            with timeout_paused():
                held.enter_context(host_lock("guests"))
        except ServiceUnavailable as exc:
            unavailable(str(exc))
        try:
            started = ensure_libvirtd(tmp_path_factory.mktemp("libvirtd"))
        except ServiceUnavailable as exc:
            unavailable(f"libvirtd on qemu:///system: {exc}")
        try:
            yield
        finally:
            for pid in reversed(started):
                stop_pid(pid)


@pytest.fixture(scope="module")
def guest_root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The test guest's init and its scripts (tools/build-test-guest.sh's `write_init`)
    written into a directory, for this machine's busybox to run pieces of."""
    if shutil.which("busybox") is None:
        unavailable("busybox is not installed (tools/install.sh installs busybox-static)")
    root = tmp_path_factory.mktemp("guest-root")
    (root / "etc").mkdir()
    (root / "bin").mkdir()
    subprocess.run(["bash", "-c", 'source "$1" && write_init "$2"', "_",
                    str(REPO / "tools" / "build-test-guest.sh"), str(root)], check=True)
    return root


@pytest.fixture(scope="session")
def test_guest_image() -> Path:
    """The qcow2 built by tools/build-test-guest.sh (cached, so usually instant)."""
    result = subprocess.run(
        ["bash", str(REPO / "tools" / "build-test-guest.sh")],
        capture_output=True, text=True, timeout=600,
    )
    if result.returncode != 0:
        unavailable(f"tools/build-test-guest.sh failed: {result.stderr.strip()[-500:]}")
    image = Path(result.stdout.strip().splitlines()[-1])
    assert image.is_file(), image
    return image


@pytest.fixture(scope="package")
def vm_config(system_libvirt: None) -> Iterator[dict[str, Any]]:
    """A compute config on its own network, dirs and metadata server (under the lock
    `system_libvirt` holds)."""
    yield from _vm_config()


def libvirt_compute(vm_config: dict[str, Any], compute_config: dict[str, Any],
                    **sections: dict[str, Any]) -> dict[str, Any]:
    """A compute daemon's config on the guests' libvirt, network and directories, with the
    real guests' build time (`job_timeout_seconds`); `sections` merged on top (e.g.
    glance=..., driver={"libvirt": {...}})."""
    return deep_merge(deep_merge(compute_config, {
        "compute": {key: vm_config["compute"][key]
                    for key in ("state_dir", "instances_dir", "job_timeout_seconds")},
        "driver": {"name": "libvirt", "libvirt": vm_config["driver"]["libvirt"]},
    }), sections)


def _vm_config() -> Iterator[dict[str, Any]]:
    root = VM_TEST_ROOT / uuidlib.uuid4().hex[:8]
    # qemu (libvirt-qemu) only traverses these; other users may not list them.
    root.mkdir(parents=True, mode=0o711)
    VM_TEST_ROOT.chmod(0o711)
    mdserver_conf = root / "mdserver.conf"
    mdserver_conf.write_text(
        "[mdserver]\n"
        f"instances_dir = {root / 'instances'}\n"
        f"network = {TEST_NETWORK}\n"
        f"log_file = {root / 'mdserver.log'}\n"
    )
    config = deep_merge(
        COMPUTE_DEFAULTS,
        {
            "compute": {
                "state_dir": str(root / "state"),
                "instances_dir": str(root / "instances"),
                # A build is the image's checks and copy, then the boot (up to
                # boot_timeout_seconds): the fake-driver tests' 30 s is less than the boot
                # alone may take under TCG on a busy machine.
                "job_timeout_seconds": 120,
            },
            "driver": {
                "libvirt": {
                    "uri": "qemu:///system",
                    "domain_type": "qemu",  # KVM here exists but is unusably slow
                    "network": TEST_NETWORK,
                    "network_cidr": TEST_NETWORK_CIDR,
                    "image_cache_dir": str(root / "images"),
                    "image_file_dirs": [str(GUEST_CACHE), str(root)],
                    "boot_timeout_seconds": 60,
                    "mdserver_config": str(mdserver_conf),
                }
            },
        },
    )
    try:
        ensure_mdserver(config)
    except Exception:
        shutil.rmtree(root, ignore_errors=True)
        raise
    yield config
    stop_mdserver(config)
    with contextlib.suppress(libvirt.libvirtError):
        nwfilter.remove_filters("qemu:///system")
    connection = libvirt.open("qemu:///system")
    with contextlib.suppress(libvirt.libvirtError):
        net = connection.networkLookupByName(TEST_NETWORK)
        if net.isActive():
            net.destroy()
        net.undefine()
    connection.close()
    shutil.rmtree(root, ignore_errors=True)
    with contextlib.suppress(OSError):
        VM_TEST_ROOT.rmdir()  # only when no other run is using it


@pytest.fixture
def computes(placement: Any, hosts: Any, host_config: dict[str, Any], write_yaml: Any,
             tmp_path: Path) -> Iterator[ComputeHosts]:
    """compute.py on each of the module's `hosts` (hypervisor hosts of their own), started
    by the test as it needs them and stopped after it (Placement outlives them)."""
    running = ComputeHosts(hosts, host_config, write_yaml, tmp_path)
    try:
        yield running
    finally:
        running.close()

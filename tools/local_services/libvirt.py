"""libvirtd (and virtlogd), started only where the machine has none."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

from etcd_compute.errors import ServiceUnavailable
from tools.local_services.process import wait_until


def libvirtd_usable(uri: str = "qemu:///system") -> bool:
    try:
        import libvirt
    except ImportError:
        return False
    try:
        libvirt.registerErrorHandler(lambda *_: None, None)
        conn = libvirt.open(uri)
    except libvirt.libvirtError:
        return False
    conn.close()
    return True


VIRTLOGD_SOCKET = Path("/run/libvirt/virtlogd-sock")


def ensure_libvirtd(run_dir: Path) -> list[int]:
    """Start libvirtd if qemu:///system is silent, and virtlogd (which writes console logs)
    if its socket is missing: each on its own, since a libvirtd without virtlogd starts no
    guest ("Failed to connect socket to '/run/libvirt/virtlogd-sock'"). A virtlogd process
    elsewhere (another libvirtd's, in its own mount namespace) is not this one.

    Returns the pids of the daemons we started, to stop later; none if both were there.
    """
    daemons = []
    if shutil.which("virtlogd") and not VIRTLOGD_SOCKET.exists():
        daemons.append(("virtlogd", run_dir / "virtlogd.pid"))
    if not libvirtd_usable():
        if shutil.which("libvirtd") is None:
            raise ServiceUnavailable("libvirtd is not installed; run: make install")
        daemons.append(("libvirtd", run_dir / "libvirtd.pid"))
    if not daemons:
        return []
    run_dir.mkdir(parents=True, exist_ok=True)
    for daemon, pidfile in daemons:
        subprocess.run([daemon, "-d", "--pid-file", str(pidfile)], check=False)
    started = {daemon for daemon, _ in daemons}
    wait_until(lambda: libvirtd_usable() and ("virtlogd" not in started
                                              or VIRTLOGD_SOCKET.exists()), 30, "libvirtd")
    return [int(pidfile.read_text().strip()) for _, pidfile in daemons if pidfile.exists()]

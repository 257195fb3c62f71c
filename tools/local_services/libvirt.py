"""libvirtd (and virtlogd), started only if qemu:///system does not answer."""

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


def ensure_libvirtd(run_dir: Path) -> list[int]:
    """Start libvirtd (and virtlogd, which writes console logs) if qemu:///system is silent.

    Returns the pids of the daemons we started, to stop later; none if libvirtd was running.
    """
    if libvirtd_usable():
        return []
    if shutil.which("libvirtd") is None:
        raise ServiceUnavailable("libvirtd is not installed; run: make install")
    run_dir.mkdir(parents=True, exist_ok=True)
    daemons = [("libvirtd", run_dir / "libvirtd.pid")]
    if shutil.which("virtlogd") and not Path("/run/libvirt/virtlogd-sock").exists():
        daemons.insert(0, ("virtlogd", run_dir / "virtlogd.pid"))
    for daemon, pidfile in daemons:
        subprocess.run([daemon, "-d", "--pid-file", str(pidfile)], check=False)
    wait_until(libvirtd_usable, 30, "libvirtd")
    return [int(pidfile.read_text().strip()) for _, pidfile in daemons if pidfile.exists()]

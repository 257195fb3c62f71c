"""A second libvirtd on this machine, as a second hypervisor host would have its own.

    lv = PrivateLibvirtd(tmp_dir, "ec1a2b3c-hvb").start()   # in that network namespace
    lv.uri   # qemu:///system?socket=<tmp_dir>/run/libvirt/libvirt-sock
    lv.stop()                                              # its guests, then the daemons

Two computes on one libvirtd share its domains: a guest rebuilt on "the other
host" would find the first host's domain of the same uuid. Tests of a host
dying therefore give the second host a libvirtd of its own: it runs in the
host's network namespace (its NAT network, dnsmasq, iptables and guests are
there) and in a private mount namespace whose /run/libvirt, /var/lib/libvirt,
/var/cache/libvirt, /var/log/libvirt and /etc/libvirt are directories under
`root` (a copy of /etc/libvirt). Clients anywhere reach it through its socket,
`root/run/libvirt/libvirt-sock`, by `uri`. Both daemons are stopped by pid.
"""

from __future__ import annotations

import contextlib
import shutil
import subprocess
from pathlib import Path

import libvirt

from etcd_compute.errors import ServiceUnavailable
from tools.local_services.process import pid_alive, stop_pid, wait_until

PRIVATE_DIRS = ("run/libvirt", "var/lib/libvirt", "var/cache/libvirt", "var/log/libvirt",
                "etc/libvirt")


class PrivateLibvirtd:
    def __init__(self, root: Path, netns: str):
        self.root, self.netns = root, netns
        self.libvirtd: subprocess.Popen[bytes] | None = None

    @property
    def socket(self) -> Path:
        return self.root / "run" / "libvirt" / "libvirt-sock"

    @property
    def uri(self) -> str:
        return f"qemu:///system?socket={self.socket}"

    def _script(self) -> str:
        binds = []
        for directory in PRIVATE_DIRS:
            binds.append(f"mount --bind {self.root / directory} /{directory}")
        return "\n".join([
            "set -e",
            "mount --make-rprivate /",
            *binds,
            f"virtlogd -d --pid-file {self.root / 'virtlogd.pid'}",
            f"exec libvirtd --pid-file {self.root / 'libvirtd.pid'}",
        ])

    def start(self) -> PrivateLibvirtd:
        for directory in PRIVATE_DIRS:
            (self.root / directory).mkdir(parents=True, exist_ok=True)
        shutil.copytree("/etc/libvirt", self.root / "etc/libvirt", dirs_exist_ok=True)
        # Its own domains and networks only: none the machine's libvirtd defined (the
        # stock nwfilters, clean-traffic and the rest, stay).
        shutil.rmtree(self.root / "etc/libvirt/qemu/networks", ignore_errors=True)
        for defined in (self.root / "etc/libvirt/qemu").glob("*.xml"):
            defined.unlink()
        log = open(self.root / "libvirtd.log", "ab")
        self.libvirtd = subprocess.Popen(
            ["ip", "netns", "exec", self.netns, "unshare", "--mount", "--propagation",
             "private", "sh", "-c", self._script()],
            stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
            start_new_session=True)
        log.close()
        try:
            wait_until(self.usable, 30, "a private libvirtd")
        except Exception:
            self.stop()
            raise
        return self

    def usable(self) -> bool:
        if self.libvirtd is not None and self.libvirtd.poll() is not None:
            raise ServiceUnavailable(
                f"private libvirtd exited ({self.libvirtd.returncode}): "
                f"{(self.root / 'libvirtd.log').read_text(errors='replace')[-500:]}")
        if not self.socket.exists():
            return False
        try:
            libvirt.open(self.uri).close()
        except libvirt.libvirtError:
            return False
        return True

    def stop(self) -> None:
        """Its guests (destroyed, so no qemu outlives it), its networks, then the daemons."""
        if self.libvirtd is not None and self.libvirtd.poll() is None:
            with contextlib.suppress(libvirt.libvirtError):
                connection = libvirt.open(self.uri)
                for domain in connection.listAllDomains():
                    with contextlib.suppress(libvirt.libvirtError):
                        if domain.isActive():
                            domain.destroy()
                for network in connection.listAllNetworks():
                    with contextlib.suppress(libvirt.libvirtError):
                        if network.isActive():
                            network.destroy()
                connection.close()
            stop_pid(self.libvirtd.pid)
        with contextlib.suppress(OSError, ValueError):
            pid = int((self.root / "virtlogd.pid").read_text().strip())
            if pid_alive(pid):
                stop_pid(pid)

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

A new libvirtd probes every qemu binary of the machine for its capabilities (7.5 s of
waiting here) unless its cache has them: each private one starts with the capabilities
the machine's cache (`templates.cache_dir`) holds and leaves there what it probed.
libvirt checks a cached file against the binaries' and its own ctimes and probes again
when they changed, so a stale file costs only the probe.

With `tls=LibvirtTls(address, pki_dir)` it also listens as a hypervisor host does
for its peers (docs/how-to/operators/several-hosts.md, step 10): TLS only, on its
namespace's address, admitting only the cluster's libvirt client certificates
(`tls_allowed_dn_list`), its server certificate and key from `pki_dir` (written by
`Pki.issue_libvirt`);
its qemu takes migrations over TLS only (`migrate_tls_force`), verifying the
peer's certificate, from `pki_dir/qemu`. `tls_uri` is how peers reach it.
"""

from __future__ import annotations

import contextlib
import os
import shlex
import shutil
import subprocess
from dataclasses import dataclass, field
from pathlib import Path

import libvirt

from etcd_compute.errors import ServiceUnavailable
from etcd_compute.pki import LIBVIRT_ALLOWED_DN, LIBVIRT_LAYOUT
from tools.local_services.process import pid_alive, stop_pid, wait_until
from tools.local_services.templates import cache_dir

PRIVATE_DIRS = ("run/libvirt", "var/lib/libvirt", "var/cache/libvirt", "var/log/libvirt",
                "etc/libvirt")
# Where libvirtd keeps what it probed of each qemu binary (under its root).
CAPABILITIES = Path("var/cache/libvirt/qemu/capabilities")


def share_capabilities(source: Path, destination: Path) -> None:
    """Copies the capability files of `source` that `destination` lacks or holds
    otherwise, each whole (another worker may read it meanwhile) and with its time (when
    it was probed)."""
    destination.mkdir(parents=True, exist_ok=True)
    for probed in source.glob("*.xml"):
        target = destination / probed.name
        content = probed.read_bytes()
        with contextlib.suppress(OSError):
            if target.read_bytes() == content:
                continue
        partial = destination / f".{probed.name}.{os.getpid()}"
        partial.write_bytes(content)
        partial.chmod(0o600)
        times = probed.stat()
        os.utime(partial, ns=(times.st_atime_ns, times.st_mtime_ns))
        os.replace(partial, target)


@dataclass(frozen=True)
class LibvirtTls:
    """How a libvirtd listens for its peers: the address, the certificates' directory."""

    address: str
    pki_dir: Path
    allowed_dns: list[str] = field(default_factory=lambda: [LIBVIRT_ALLOWED_DN])

    def libvirtd_conf(self) -> str:
        pem = {role: self.pki_dir / name for role, name in LIBVIRT_LAYOUT.items()}
        allowed = ", ".join(f'"{dn}"' for dn in self.allowed_dns)
        return "\n".join([
            "listen_tls = 1", "listen_tcp = 0", f'listen_addr = "{self.address}"',
            'auth_tls = "none"',  # the client certificate is the credential
            f'ca_file = "{pem["ca"]}"', f'cert_file = "{pem["server-cert"]}"',
            f'key_file = "{pem["server-key"]}"', f"tls_allowed_dn_list = [{allowed}]", ""])

    def qemu_conf(self) -> str:
        return "\n".join([
            f'migrate_tls_x509_cert_dir = "{self.pki_dir / "qemu"}"',
            "migrate_tls_x509_verify = 1", "migrate_tls_force = 1", ""])


class PrivateLibvirtd:
    def __init__(self, root: Path, netns: str, tls: LibvirtTls | None = None,
                 binds: dict[str, Path] | None = None):
        self.root, self.netns, self.tls = root, netns, tls
        # More of the machine's directories replaced inside its mount namespace: {where:
        # by what} (a host's Open vSwitch run directory on /run/openvswitch, where the
        # `ovs-vsctl` libvirt runs looks for its database). A missing mount point is made
        # (an empty directory of the machine's: a mount needs one).
        self.binds = dict(binds or {})
        self.libvirtd: subprocess.Popen[bytes] | None = None
        # The machine's probed capabilities (None: caching is off).
        self.shared_capabilities = cache_dir("libvirt-capabilities")

    @property
    def socket(self) -> Path:
        return self.root / "run" / "libvirt" / "libvirt-sock"

    @property
    def uri(self) -> str:
        return f"qemu:///system?socket={self.socket}"

    def tls_uri(self, client_pki: Path) -> str:
        """How a peer with the libvirt certificates in `client_pki` reaches it."""
        assert self.tls is not None, "this libvirtd does not listen"
        return f"qemu+tls://{self.tls.address}/system?pkipath={client_pki}"

    def _script(self) -> str:
        binds = []
        for directory in PRIVATE_DIRS:
            binds.append(f"mount --bind {self.root / directory} /{directory}")
        for where, source in self.binds.items():
            binds += [f"mkdir -p {shlex.quote(where)}",
                      f"mount --bind {shlex.quote(str(source))} {shlex.quote(where)}"]
        return "\n".join([
            "set -e",
            "mount --make-rprivate /",
            *binds,
            # Running already when libvirtd is restarted after a kill.
            f"virtlogd -d --pid-file {self.root / 'virtlogd.pid'} || true",
            f"exec libvirtd --pid-file {self.root / 'libvirtd.pid'}"
            + (" --listen" if self.tls else ""),
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
        shared = self.shared_capabilities
        if shared is not None and shared.is_dir():
            share_capabilities(shared, self.root / CAPABILITIES)
        if self.tls is not None:
            for name, text in (("libvirtd.conf", self.tls.libvirtd_conf()),
                               ("qemu.conf", self.tls.qemu_conf())):
                with open(self.root / "etc/libvirt" / name, "a") as conf:
                    conf.write(f"\n# tools/local_services/private_libvirt.py\n{text}")
        return self.restart()

    def restart(self) -> PrivateLibvirtd:
        """libvirtd (again) on its directories: after `kill`, it finds its domains and
        their qemu processes as a restarted daemon does."""
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

    def kill(self) -> None:
        """libvirtd dies (SIGKILL, as in a crash); its guests' qemu and virtlogd run on."""
        if self.libvirtd is not None and self.libvirtd.poll() is None:
            self.libvirtd.kill()
            self.libvirtd.wait()

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
        shared = self.shared_capabilities
        if shared is not None and (self.root / CAPABILITIES).is_dir():
            with contextlib.suppress(OSError):
                share_capabilities(self.root / CAPABILITIES, shared)
        # A guest whose libvirtd was killed (and not restarted) is stopped by its pid.
        for pid_file in (self.root / "run/libvirt/qemu").glob("*.pid"):
            with contextlib.suppress(OSError, ValueError):
                pid = int(pid_file.read_text().strip())
                if pid_alive(pid) and "qemu" in Path(f"/proc/{pid}/comm").read_text():
                    stop_pid(pid)
        with contextlib.suppress(OSError, ValueError):
            pid = int((self.root / "virtlogd.pid").read_text().strip())
            if pid_alive(pid):
                stop_pid(pid)

"""Two (or more) hypervisor hosts on this machine, each with its own libvirtd listening on
TLS for its peers, as the multi-host guide sets them up (README, "Moving guests").

    with Hypervisors.create(["a", "b"]) as hosts:
        a, b = hosts["a"], hosts["b"]
        a.driver().build(spec)                      # the libvirt driver, as compute.py has it
        b.driver().prepare_incoming(spec) ...

Each host is a network namespace on a private bridge (`tools/local_services/netns.py`)
with a private libvirtd (`private_libvirt.py`): TLS only, on the namespace's
address, admitting the cluster's libvirt client certificates, its qemu migrating
over TLS only. Certificates come from one cluster CA (`Pki.issue_libvirt`). Both
hosts' guest networks have the same name and CIDR (as on real hosts, where each has
its own NAT network); the metadata address answers "closed" at once inside each
namespace, so the test guest does not wait out its metadata retries. The drivers
run in the test process (root namespace): they reach their own libvirtd by its
socket and the peers' over TLS through the bridge. Each guest network's bridge has
a name of this run's (`ecg<net id><n>`), defined here before any driver looks: the
driver's `ip` commands, run in the root namespace, find no such bridge there and
change nothing of the machine's.
"""

from __future__ import annotations

import contextlib
import grp
import shutil
import subprocess
import time
import uuid as uuidlib
import xml.etree.ElementTree as ET
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import libvirt

from etcd_compute.config import COMPUTE_DEFAULTS, deep_merge
from etcd_compute.drivers.libvirt import LibvirtDriver
from etcd_compute.pki import Pki
from etcd_compute.virt import network
from tests.support import make_spec
from tests.virt.conftest import GUEST_CACHE, VM_TEST_ROOT
from tools.local_services.netns import Host, TestNetwork, ip
from tools.local_services.private_libvirt import LibvirtTls, PrivateLibvirtd

GUEST_NETWORK = "etcd-compute-mig"
GUEST_CIDR = "192.168.126.0/24"
RESOURCES = {"VCPU": 1, "MEMORY_MB": 128, "DISK_GB": 1}
QEMU_GROUP = "libvirt-qemu"

# The test guest's user-data: a counter on the console every 100 ms, and a marker file on
# its disk (the FAT partition it booted from): written once, read from the disk again
# (page cache dropped) every second, so a disk that did not travel shows.
COUNTER_SCRIPT = r"""#!/bin/sh
. /etc/guest-functions
mkdir -p /mnt
mount -t vfat /dev/vda1 /mnt
if [ -f /mnt/marker ]; then
    say "marker found $(cat /mnt/marker)"
else
    echo "MARKER-$(cat /proc/sys/kernel/random/uuid)" >/mnt/marker
    sync
    say "marker written $(cat /mnt/marker)"
fi
n=0
while true; do
    n=$((n + 1))
    say "tick $n"
    if [ $((n % 10)) -eq 0 ]; then
        sync; echo 3 >/proc/sys/vm/drop_caches
        say "marker read $(cat /mnt/marker)"
    fi
    usleep 100000
done
"""


# A guest that dirties memory as fast as it can copy it (24 MiB, again and again): faster
# than a bandwidth-limited migration crosses, so only the bound makes it complete.
BUSY_SCRIPT = r"""#!/bin/sh
. /etc/guest-functions
dd if=/dev/urandom of=/tmp/a bs=1M count=24 2>/dev/null
n=0
while true; do
    cp /tmp/a /tmp/b
    n=$((n + 1))
    say "tick $n"
done
"""


@dataclass
class Hypervisor:
    name: str
    space: Host
    libvirtd: PrivateLibvirtd
    pki_dir: Path
    config: dict[str, Any]

    @property
    def address(self) -> str:
        return self.space.ip

    @property
    def instances_dir(self) -> Path:
        return Path(self.config["compute"]["instances_dir"])

    def driver(self, **migration: Any) -> LibvirtDriver:
        config = deep_merge(self.config, {"driver": {"libvirt": {"migration": migration}}})
        return LibvirtDriver(config)

    def connection(self) -> libvirt.virConnect:
        return libvirt.open(self.libvirtd.uri)

    def domain_active(self, uuid: str) -> bool:
        connection = self.connection()
        try:
            return bool(connection.lookupByName(uuid).isActive())
        except libvirt.libvirtError:
            return False
        finally:
            connection.close()

    def has_domain(self, uuid: str) -> bool:
        connection = self.connection()
        try:
            connection.lookupByName(uuid)
            return True
        except libvirt.libvirtError:
            return False
        finally:
            connection.close()

    def console(self, uuid: str) -> str:
        path = self.instances_dir / uuid / "console.log"
        return path.read_text(errors="replace") if path.exists() else ""


@dataclass
class Hypervisors:
    root: Path
    net: TestNetwork
    pki: Pki
    hosts: dict[str, Hypervisor]

    def __getitem__(self, name: str) -> Hypervisor:
        return self.hosts[name]

    @classmethod
    @contextlib.contextmanager
    def create(cls, names: list[str]) -> Iterator[Hypervisors]:
        root = VM_TEST_ROOT / f"mig-{uuidlib.uuid4().hex[:8]}"
        root.mkdir(parents=True, mode=0o711)
        VM_TEST_ROOT.chmod(0o711)
        net = TestNetwork.create()
        hosts = cls(root, net, Pki(root / "pki"), {})
        try:
            hosts.pki.init()
            for name in names:
                hosts.add(name)
            yield hosts
        finally:
            hosts.close()

    def add(self, name: str, pki_dir: Path | None = None) -> Hypervisor:
        """A host `hv<name>` with certificates for its own name and address (or those in
        `pki_dir`, to make a host that presents someone else's)."""
        space = self.net.add_host(name)
        # The guests' metadata retries end at once ("connection refused" from here).
        ip("-n", space.netns, "addr", "add", "169.254.169.254/32", "dev", "lo")
        if pki_dir is None:
            pki_dir = self.pki.issue_libvirt(f"hv{name}", self.root / f"libvirt-pki-{name}",
                                             ips=[space.ip],
                                             qemu_group=grp.getgrnam(QEMU_GROUP).gr_gid)
        libvirtd = PrivateLibvirtd(self.root / f"libvirt-{name}", space.netns,
                                   tls=LibvirtTls(space.ip, pki_dir))
        self.hosts[name] = host = Hypervisor(name, space, libvirtd, pki_dir,
                                             self._config(name, space, pki_dir))
        libvirtd.start()
        xml = ET.fromstring(network.network_xml(GUEST_NETWORK, GUEST_CIDR))
        bridge = xml.find("bridge")
        assert bridge is not None
        bridge.set("name", f"ecg{self.net.id}{len(self.hosts)}")
        connection = host.connection()
        try:
            connection.networkDefineXML(ET.tostring(xml, encoding="unicode")).create()
        finally:
            connection.close()
        return host

    def _config(self, name: str, space: Host, pki_dir: Path) -> dict[str, Any]:
        here = self.root / name
        return deep_merge(COMPUTE_DEFAULTS, {
            "compute": {"state_dir": str(here / "state"),
                        "instances_dir": str(here / "instances")},
            "driver": {"libvirt": {
                "uri": f"qemu:///system?socket={self.root / f'libvirt-{name}'}"
                       "/run/libvirt/libvirt-sock",
                "domain_type": "qemu", "network": GUEST_NETWORK, "network_cidr": GUEST_CIDR,
                "image_cache_dir": str(here / "images"), "image_file_dirs": [str(GUEST_CACHE)],
                "boot_timeout_seconds": 180, "shutdown_timeout_seconds": 1,
                "migration": {"address": space.ip, "pki_dir": str(pki_dir)}}},
        })

    def close(self) -> None:
        for host in self.hosts.values():
            with contextlib.suppress(Exception):
                host.libvirtd.stop()
        self.net.delete()
        shutil.rmtree(self.root, ignore_errors=True)
        with contextlib.suppress(OSError):
            VM_TEST_ROOT.rmdir()


def counter_spec(image: Path, script: str = COUNTER_SCRIPT, **extra: Any) -> dict[str, Any]:
    uuid = str(uuidlib.uuid4())
    return make_spec("00000000-0000-0000-0000-0000000000aa", f"file://{image}", uuid=uuid,
                     name=f"mover-{uuid[:8]}", resources=dict(RESOURCES), user_data=script,
                     **extra)


def ticks(console: str) -> list[int]:
    return [int(line.split()[-1]) for line in console.splitlines()
            if line.startswith("ETCD-COMPUTE-GUEST tick ") and line.split()[-1].isdigit()]


class ConsoleClock:
    """When each tick line of a guest appeared, read from its console files every 10 ms in
    a thread: the longest silence around the switch is the downtime the guest's output
    shows (the guest's own clock stops while it is paused; the host's does not)."""

    def __init__(self, paths: list[Path]):
        self.paths = paths
        self.seen: dict[int, float] = {}
        self._stop = False
        self._thread: Any = None

    def __enter__(self) -> ConsoleClock:
        import threading

        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *_exc: object) -> None:
        self._stop = True
        self._thread.join()

    def _run(self) -> None:
        while not self._stop:
            now = time.monotonic()
            for path in self.paths:
                with contextlib.suppress(OSError):
                    for tick in ticks(path.read_text(errors="replace")):
                        self.seen.setdefault(tick, now)
            time.sleep(0.01)

    def longest_gap(self) -> float:
        times = [self.seen[t] for t in sorted(self.seen)]
        return max((b - a for a, b in zip(times, times[1:], strict=False)), default=0.0)


def qemu_pids(root: Path) -> list[int]:
    """Running qemu processes whose command line mentions `root` (a host's files)."""
    found = subprocess.run(["pgrep", "-f", f"qemu-system.*{root}"], capture_output=True,
                           text=True, check=False)
    return [int(pid) for pid in found.stdout.split()]

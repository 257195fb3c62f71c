"""Two (or more) hypervisor hosts with TLS libvirtds for the tests
(`tools/local_services/hypervisors.py`), compute daemons on them (`ComputeHosts`), and
the test guest's programs for moving it: a counter on its console and a marker on its
disk, or memory dirtied as fast as it goes; clocks reading their consoles.
"""

from __future__ import annotations

import contextlib
import ipaddress
import subprocess
import threading
import time
import uuid as uuidlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.support import make_spec
from tests.virt.conftest import GUEST_CACHE, VM_TEST_ROOT
from tools.local_services.hypervisors import GUEST_CIDR, ComputeHosts, Hypervisors  # noqa: F401
from tools.local_services.netns import netns_usable

RESOURCES = {"VCPU": 1, "MEMORY_MB": 128, "DISK_GB": 1}

# The test guest's user-data: a counter on the console every 100 ms, and a marker file on
# its disk (the FAT partition it booted from): written once, read from the disk again
# (page cache dropped) every second, so a disk that did not travel shows. Beside it,
# every second, whether its host's DNS (dnsmasq on the gateway, which its filter lets it
# reach) answers: "dns answered" or "dns silent".
COUNTER_SCRIPT = r"""#!/bin/sh
. /etc/guest-functions
(
    while true; do
        if nslookup x.invalid GATEWAY 2>&1 | grep -q "server can't find"; then
            say "dns answered"
        else
            say "dns silent"
        fi
        sleep 1
    done
) &
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
mkdir -p /tmp
dd if=/dev/urandom of=/tmp/a bs=1M count=24 2>/dev/null
n=0
while true; do
    cp /tmp/a /tmp/b
    n=$((n + 1))
    say "tick $n"
done
"""


@contextlib.contextmanager
def hypervisors(names: list[str]) -> Iterator[Hypervisors]:
    """Hypervisor hosts `names`, each in a network namespace of its own (fails, never skips,
    where namespaces cannot be made)."""
    why = netns_usable()
    if why:
        pytest.fail(f"hypervisor hosts {', '.join(names)} need network namespaces: {why}")
    with Hypervisors.create(names, VM_TEST_ROOT, [str(GUEST_CACHE)]) as hosts:
        yield hosts


def counter_spec(image: Path, script: str = COUNTER_SCRIPT, **extra: Any) -> dict[str, Any]:
    uuid = str(uuidlib.uuid4())
    script = script.replace("GATEWAY", str(ipaddress.IPv4Network(GUEST_CIDR).network_address + 1))
    return make_spec("00000000-0000-0000-0000-0000000000aa", f"file://{image}", uuid=uuid,
                     name=f"mover-{uuid[:8]}", resources=dict(RESOURCES), user_data=script,
                     **extra)


def not_booted_again(console: str, where: str) -> None:
    """A guest moved live is the same boot: no boot line on its new host's console. If
    there is one, the failure shows what the console said before it (a kernel panic's
    "Rebooting in 5 seconds" and its cause, since the test guest boots with panic=5)."""
    at = console.find("ETCD-COMPUTE-GUEST boot")
    assert at < 0, (f"the guest booted again on {where}; its console up to that boot:\n"
                    + "\n".join(console[:at].splitlines()[-60:]))


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


class LineClock:
    """When each console file last grew and first had anything, by the host's clock,
    read every 10 ms in a thread."""

    def __init__(self, paths: dict[str, Path]):
        self.paths = paths
        self.first: dict[str, float] = {}
        self.last: dict[str, float] = {}
        self._sizes: dict[str, int] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> LineClock:
        self._thread.start()
        return self

    def __exit__(self, *_exc: object) -> None:
        self._stop.set()
        self._thread.join()

    def _run(self) -> None:
        while not self._stop.wait(0.01):
            now = time.monotonic()
            for name, path in self.paths.items():
                with contextlib.suppress(OSError):
                    size = path.stat().st_size
                    if size > self._sizes.get(name, 0):
                        self.first.setdefault(name, now)
                        self.last[name] = now
                    self._sizes[name] = size

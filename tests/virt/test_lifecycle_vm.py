"""The lifecycle of one real qemu guest: schedule.py -> compute.py (libvirt) -> guest.

stop -> start -> reboot -> resize up (vCPUs and memory in the domain) -> rebuild (same
uuid, MAC, IP and config-drive identity, a new disk) -> `virsh destroy` behind our back
(SHUTOFF within seconds, from libvirt's lifecycle events) -> a rebuild from an image the
host's policy refuses (nothing changes) -> destroy; the record, the events and Placement's
usage checked after each step. The compute and its guest are on a hypervisor host of their
own (tools/local_services/hypervisors.py: a network namespace with its libvirtd, guest
network and metadata server): no fixed name of the machine's, so these tests run beside the
other workers' guests instead of in the serial "guests" group.
"""

from __future__ import annotations

import ipaddress
import re
import subprocess
import time
import xml.etree.ElementTree as ET
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import libvirt
import pytest

from etcd_compute.ops import lifecycle
from tests.compute.helpers import record, wait_state
from tests.support import wait_for
from tests.virt.hypervisors import ComputeHosts, hypervisors
from tools.local_services.hypervisors import GUEST_CIDR, Hypervisor

pytestmark = pytest.mark.vm

START = {"VCPU": 1, "MEMORY_MB": 128, "DISK_GB": 1}
BIGGER = {"VCPU": 2, "MEMORY_MB": 192, "DISK_GB": 2}


def guest_console(instances_dir: Path, uuid: str) -> str:
    try:
        return (instances_dir / uuid / "console.log").read_text(errors="replace")
    except OSError:
        return ""


class Compute:
    """The test's compute daemon on its hypervisor host (shutdown_timeout_seconds 1 s
    there: the test guest ignores ACPI, so a stop waits it out), running."""

    def __init__(self, host: Hypervisor, computes: ComputeHosts, log: Path, store) -> None:
        self.host, self.rp, self._log = host, computes.rp("a"), log
        self.computes = computes
        self.instances_dir = host.instances_dir
        computes.start("a")
        wait_for(lambda: store.get(store.keys.alive(self.rp)), 60, what="compute heartbeat")

    def log(self) -> str:
        return self._log.read_text(errors="replace") if self._log.exists() else ""


@pytest.fixture
def compute(placement, store, host_config, write_yaml, tmp_path: Path) -> Iterator[Compute]:
    with hypervisors(["a"]) as hosts:
        computes = ComputeHosts(hosts, host_config, write_yaml, tmp_path)
        try:
            yield Compute(hosts["a"], computes, tmp_path / "host-a.log", store)
        finally:
            computes.close()


def test_one_guest_through_every_action(compute: Compute, test_guest_image: Path,
                                        run_schedule, store, placement) -> None:
    rp, instances_dir = compute.rp, compute.instances_dir
    started = time.monotonic()

    placed = run_schedule("resources=VCPU:1,MEMORY_MB:128,DISK_GB:1", "--image",
                          f"file://{test_guest_image}", timeout=120)
    assert placed.code == 0, placed.stderr
    uuid = placed.stdout.split()[-1]
    ip = wait_state(store, uuid, "ACTIVE", timeout=180)["ip"]
    assert ip and ipaddress.IPv4Address(ip) in ipaddress.IPv4Network(GUEST_CIDR)
    connection = compute.host.connection()

    def guest() -> libvirt.virDomain:
        return connection.lookupByName(uuid)

    def step(*words: str, state: str, usage: dict[str, int] = START) -> dict[str, Any]:
        done = run_schedule(*words, "--wait", timeout=120)
        assert done.code == 0, done.stderr
        now = record(store, uuid)
        assert now["state"] == state and now["ip"] == ip
        assert placement.get_usages(rp) == usage
        last = lifecycle.instance_events(store, uuid)[-1]
        assert (last["action"], last["result"]) == (words[0], "success")
        print(f"{words[0]}: done at {time.monotonic() - started:.1f} s")
        return now

    try:
        step("stop", uuid, state="SHUTOFF")
        assert not guest().isActive()
        step("start", uuid, state="ACTIVE")
        assert guest().isActive()
        before = guest().ID()
        step("reboot", uuid, state="ACTIVE")  # asked first; this guest ignores ACPI: forced
        assert guest().isActive() and guest().ID() != before  # a new qemu process

        resized = step("resize", "resources=VCPU:2,MEMORY_MB:192,DISK_GB:2", uuid,
                       state="ACTIVE", usage=BIGGER)
        assert resized["resources"] == BIGGER
        root = ET.fromstring(guest().XMLDesc(0))
        assert root.findtext("vcpu") == "2"
        assert int(root.findtext("memory")) == 192 * 1024  # KiB
        _state, max_kib, _mem, vcpus, _cpu = guest().info()
        assert (max_kib, vcpus) == (192 * 1024, 2)
        disk = instances_dir / uuid / "disk.qcow2"
        info = subprocess.run(["qemu-img", "info", "-U", "--output=json", str(disk)],
                              capture_output=True, text=True, check=True).stdout
        assert '"virtual-size": 2147483648' in info

        mac = root.find("devices/interface/mac").get("address")
        inode = disk.stat().st_ino
        step("rebuild", uuid, state="ACTIVE", usage=BIGGER)
        assert disk.stat().st_ino != inode  # a new disk from the image ...
        root = ET.fromstring(guest().XMLDesc(0))
        assert root.find("devices/interface/mac").get("address") == mac  # ... same NIC
        # The rebuilt guest boots, gets the same address and reads the same identity.
        console = wait_for(lambda: (lambda text: text if "ETCD-COMPUTE-GUEST ready" in text
                                    else None)(guest_console(instances_dir, uuid)),
                           120, interval=0.5, what="the rebuilt guest to boot")
        assert f"ETCD-COMPUTE-GUEST ip={ip}" in console
        assert f"ETCD-COMPUTE-GUEST configdrive instance-id={uuid}" in console
        print(f"rebuilt guest up at {time.monotonic() - started:.1f} s")

        # Behind our back: the record follows within seconds, from libvirt's events.
        subprocess.run(["virsh", "-q", "-c", compute.host.libvirtd.uri, "destroy", uuid],
                       check=True, capture_output=True)
        destroyed_at = time.monotonic()
        wait_for(lambda: record(store, uuid)["state"] == "SHUTOFF", 10, interval=0.1,
                 what="SHUTOFF after virsh destroy")
        print(f"virsh destroy seen as SHUTOFF {time.monotonic() - destroyed_at:.2f} s after")
        seen = lifecycle.instance_events(store, uuid)[-1]
        assert (seen["action"], seen["by"], seen["detail"]) == (
            "power-off", "hypervisor", "powered off outside etcd-compute")
        assert placement.get_usages(rp) == BIGGER  # stopped, not gone: it keeps its claim

        # An image the host's policy refuses: the rebuild fails and nothing changes.
        inode = disk.stat().st_ino
        refused = run_schedule("rebuild", "--image", "file:///etc/shadow", uuid, "--wait",
                               timeout=60)
        assert refused.code == 1
        assert re.search(r"rebuild of \S+ failed: .*not under a directory allowed",
                         refused.stderr), refused.stderr
        now = record(store, uuid)
        assert (now["state"], now["image"]) == ("SHUTOFF", f"file://{test_guest_image}")
        assert disk.stat().st_ino == inode and not guest().isActive()

        assert run_schedule("destroy", uuid, "--wait", timeout=60).code == 0
        assert record(store, uuid)["state"] == "DELETED"
        with pytest.raises(libvirt.libvirtError):
            connection.lookupByName(uuid)
        assert placement.get_allocations(uuid)["allocations"] == {}
        assert not (instances_dir / uuid).exists()
        assert [e["action"] for e in lifecycle.instance_events(store, uuid)] == [
            "create", "stop", "start", "reboot", "resize", "rebuild", "power-off", "rebuild",
            "destroy"]
        print(f"whole lifecycle: {time.monotonic() - started:.1f} s")
        assert "Traceback" not in compute.log()
    finally:
        print("\n".join(line[:200] for line in compute.log().splitlines()
                        if "DEBUG" not in line))
        if uuid in {d.name() for d in connection.listAllDomains()}:
            run_schedule("destroy", uuid, "--wait", timeout=60)
        connection.close()


# A counter on the console, once a second, from the guest's user-data.
COUNTING = """#!/bin/sh
. /etc/guest-functions
n=0
while true; do n=$((n + 1)); say "tick $n"; sleep 1; done
"""


def ticks(console: str) -> list[int]:
    return [int(line.split()[-1]) for line in console.splitlines()
            if line.startswith("ETCD-COMPUTE-GUEST tick ") and line.split()[-1].isdigit()]


def place_counting(run_schedule, test_guest_image: Path, tmp_path: Path) -> str:
    """A test guest that prints a counter tick every second (COUNTING), placed: its uuid."""
    script = tmp_path / "user-data"
    script.write_text(COUNTING)
    placed = run_schedule("resources=VCPU:1,MEMORY_MB:128,DISK_GB:1", "--image",
                          f"file://{test_guest_image}", "--user-data", str(script),
                          timeout=120)
    assert placed.code == 0, placed.stderr
    return str(placed.stdout.split()[-1])


def wait_counting(store, instances_dir: Path, uuid: str) -> None:
    """The counting guest ACTIVE and three ticks on its console."""
    wait_state(store, uuid, "ACTIVE", timeout=180)
    wait_for(lambda: len(ticks(guest_console(instances_dir, uuid))) >= 3, 120,
             interval=0.5, what="the guest counting")


def test_a_suspended_guest_resumes_counting_where_it_stopped(
        compute: Compute, test_guest_image: Path, run_schedule, store, placement,
        tmp_path: Path) -> None:
    """suspend is libvirt's managed save: the guest's memory on the host's disk, the domain
    shut off; resume restores it, so its counter goes on instead of starting again."""
    rp, instances_dir = compute.rp, compute.instances_dir
    uuid = place_counting(run_schedule, test_guest_image, tmp_path)
    connection = compute.host.connection()
    try:
        wait_counting(store, instances_dir, uuid)
        done = run_schedule("suspend", uuid, "--wait", timeout=120)
        assert done.code == 0, done.stderr
        counted = max(ticks(guest_console(instances_dir, uuid)))
        assert record(store, uuid)["state"] == "SUSPENDED"
        domain = connection.lookupByName(uuid)
        assert not domain.isActive() and domain.hasManagedSaveImage(0)
        assert placement.get_usages(rp) == START  # suspended, not gone: it keeps its claim
        refused = run_schedule("start", uuid, timeout=60)
        assert refused.code == 1 and "is SUSPENDED: start is not allowed now (allowed: " \
            "resume, snapshot, destroy)" in refused.stderr, refused.stderr
        time.sleep(3)  # the guest's clock stops with it: no tick is lost, none is printed

        done = run_schedule("resume", uuid, "--wait", timeout=120)
        assert done.code == 0, done.stderr
        assert record(store, uuid)["state"] == "ACTIVE" and domain.isActive()
        assert not domain.hasManagedSaveImage(0)
        # The console log starts again with the restored qemu: only what came after.
        after = wait_for(lambda: (lambda seen: seen if seen and max(seen) > counted + 2
                                  else None)(ticks(guest_console(instances_dir, uuid))),
                         60, interval=0.5, what="the resumed guest counting on")
        assert min(after) > counted, (counted, after)  # on from where it was, not from 1
        assert "ETCD-COMPUTE-GUEST boot" not in guest_console(instances_dir, uuid)

        run_schedule("suspend", uuid, "--wait", timeout=120)
        assert connection.lookupByName(uuid).hasManagedSaveImage(0)
        assert run_schedule("destroy", uuid, "--wait", timeout=60).code == 0
        with pytest.raises(libvirt.libvirtError):
            connection.lookupByName(uuid)  # its managed-save image removed with it
        saved = compute.host.libvirtd.root / "var/lib/libvirt/qemu/save" / f"{uuid}.save"
        assert saved.parent.is_dir() and not saved.exists()
        assert [e["action"] for e in lifecycle.instance_events(store, uuid)] == [
            "create", "suspend", "resume", "suspend", "destroy"]
        assert "Traceback" not in compute.log()
    finally:
        if uuid in {d.name() for d in connection.listAllDomains()}:
            run_schedule("destroy", uuid, "--wait", timeout=60)
        connection.close()


def test_a_paused_guest_stops_where_it_is_and_unpause_runs_it_on(
        compute: Compute, test_guest_image: Path, run_schedule, store, placement,
        tmp_path: Path) -> None:
    """pause is libvirt's suspend of the domain (Nova's pause): the guest frozen, its memory
    in qemu's process, the domain PAUSED; its counter stops and nothing else of it runs.
    A restart of compute.py keeps it PAUSED (the domain is), unpause runs it on from the
    same tick (no boot), and a paused guest powered off behind our back shows SHUTOFF."""
    rp, instances_dir = compute.rp, compute.instances_dir
    uuid = place_counting(run_schedule, test_guest_image, tmp_path)
    connection = compute.host.connection()
    try:
        wait_counting(store, instances_dir, uuid)
        done = run_schedule("pause", uuid, "--wait", timeout=120)
        assert done.code == 0, done.stderr
        assert record(store, uuid)["state"] == "PAUSED"
        domain = connection.lookupByName(uuid)
        assert domain.state()[0] == libvirt.VIR_DOMAIN_PAUSED and domain.isActive()
        assert not domain.hasManagedSaveImage(0)  # nothing written to disk
        assert placement.get_usages(rp) == START  # paused: it keeps its claim
        counted = max(ticks(guest_console(instances_dir, uuid)))
        time.sleep(4)  # frozen: not one tick more
        assert max(ticks(guest_console(instances_dir, uuid))) == counted
        refused = run_schedule("stop", uuid, timeout=60)
        assert refused.code == 1 and "is PAUSED: stop is not allowed now (allowed: " \
            "unpause, reboot, snapshot, destroy)" in refused.stderr, refused.stderr

        # compute.py killed and started again: its reconcile and power sync find the domain
        # PAUSED (active): the record stays PAUSED, the guest frozen.
        compute.computes.kill9("a")
        compute.computes.start("a")
        wait_for(lambda: compute.log().count("compute ready") >= 2, 90,
                 what="the restarted compute reconciled and ready")
        time.sleep(2)  # its power sync's check of every guest, answered
        assert record(store, uuid)["state"] == "PAUSED"
        assert domain.state()[0] == libvirt.VIR_DOMAIN_PAUSED
        assert max(ticks(guest_console(instances_dir, uuid))) == counted

        done = run_schedule("unpause", uuid, "--wait", timeout=120)
        assert done.code == 0, done.stderr
        assert record(store, uuid)["state"] == "ACTIVE"
        assert domain.state()[0] == libvirt.VIR_DOMAIN_RUNNING
        # The same qemu runs on: the console log goes on from the tick it froze at.
        wait_for(lambda: max(ticks(guest_console(instances_dir, uuid))) > counted + 2, 60,
                 interval=0.5, what="the unpaused guest counting on")
        seen = ticks(guest_console(instances_dir, uuid))
        assert seen == list(range(1, len(seen) + 1)), seen  # on from where it was, from 1 once
        assert guest_console(instances_dir, uuid).count("ETCD-COMPUTE-GUEST boot") == 1

        # Paused again, then powered off behind our back: its memory is gone, SHUTOFF.
        assert run_schedule("pause", uuid, "--wait", timeout=120).code == 0
        domain.destroy()
        wait_state(store, uuid, "SHUTOFF", timeout=30)
        assert run_schedule("destroy", uuid, "--wait", timeout=60).code == 0
        with pytest.raises(libvirt.libvirtError):
            connection.lookupByName(uuid)
        assert [e["action"] for e in lifecycle.instance_events(store, uuid)] == [
            "create", "pause", "unpause", "pause", "power-off", "destroy"]
        assert "Traceback" not in compute.log()
    finally:
        if uuid in {d.name() for d in connection.listAllDomains()}:
            run_schedule("destroy", uuid, "--wait", timeout=60)
        connection.close()

"""Moves through the compute daemons with real guests, where they can go wrong: two
hypervisor hosts, each in its network namespace with its own libvirtd on TLS and its
compute daemon (tests/virt/hypervisors.py), a controller, real etcd and Placement.

`host drain` moves every running guest live: each counts on from the next number on the
other host and reads back the marker it wrote on its disk before. A live move whose
destination's libvirtd dies while the guest's memory is crossing: the guest counts on at
the source, Placement holds the source alone again (no migration consumer left), the
destination keeps nothing of it, and the operator reads why in one line."""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator

import libvirt
import pytest

from etcd_compute import events
from etcd_compute.config import deep_merge
from etcd_compute.instances import migrations, records
from tests.support import wait_for
from tests.virt.hypervisors import (
    ComputeHosts,
    hypervisors,
    not_booted_again,
    qemu_pids,
    ticks,
)
from tests.virt.test_migrate_command_vm import (
    counting_guest,
    counting_on_a,
    send_counting_guest,
)
from tools.local_services.hypervisors import Hypervisors

# Two hypervisors' libvirtds and TCG guests: 50-90 s each alone, several times that while
# other workers boot guests (the suite's 300 s is for one step's hang).
pytestmark = [pytest.mark.vm, pytest.mark.timeout(600)]


@pytest.fixture
def hosts() -> Iterator[Hypervisors]:
    with hypervisors(["a", "b"]) as made:
        yield made


def start_all(computes: ComputeHosts, store, start_controller, schedule_config) -> None:
    start_controller(deep_merge(schedule_config, {"scheduler": {"controller_lease_ttl": 3}}))
    for name in ("a", "b"):
        computes.start(name)
        wait_for(lambda n=name: store.get(store.keys.alive(computes.rp(n))), 60,
                 what=f"host {name}'s heartbeat")
    wait_for(lambda: store.get(store.keys.leader()), 30, what="a controller to lead")


def counts_on_with_its_disk(host, uuid: str, marker: str) -> None:
    """The guest runs on `host` as the same boot (its counter goes on from where the
    console it brought along ended) and reads its marker from the disk there."""
    history = (host.instances_dir / uuid / "console.history.log").read_text()
    wait_for(lambda: len(ticks(host.console(uuid))) >= 3, 60, interval=0.2,
             what=f"{uuid} counting on {host.name}")
    assert ticks(host.console(uuid))[0] == ticks(history)[-1] + 1
    not_booted_again(host.console(uuid), host.name)
    wait_for(lambda: f"marker read {marker}" in host.console(uuid), 30, interval=0.2,
             what=f"{uuid}'s marker read back on {host.name}")


def test_a_host_drains_live_and_each_guest_keeps_counting_with_its_disk(
        hosts, computes, schedule_config, start_controller, store, placement, run_schedule,
        test_guest_image):
    a, b = hosts["a"], hosts["b"]
    start_all(computes, store, start_controller, schedule_config)
    # Both sent before either is waited for: they boot together.
    sent = [send_counting_guest(store, placement, computes, test_guest_image)
            for _ in range(2)]
    guests = [(uuid, counting_on_a(store, hosts, uuid)) for uuid in sent]

    drained = run_schedule("host", "drain", "host-a", timeout=900)
    assert drained.code == 0, drained.stdout + drained.stderr
    assert drained.stdout.splitlines()[-1] == "DRAINED 2 moved, 0 error, 0 left, 0 gone", \
        drained.stdout
    assert drained.stdout.count("moving live to host-b") == 2, drained.stdout
    rp_a, rp_b = computes.rp("a"), computes.rp("b")
    for uuid, marker in guests:
        assert b.domain_active(uuid) and not a.has_domain(uuid)
        assert not (a.instances_dir / uuid).exists()
        counts_on_with_its_disk(b, uuid, marker)
        host, read = records.find(store, uuid)
        assert (host, read.state) == (rp_b, "ACTIVE")
        assert set(placement.get_allocations(uuid)["allocations"]) == {rp_b}
        assert migrations.read(store, uuid) == (None, None)
    assert placement.get_usages(rp_a)["VCPU"] == 0
    assert store.get_prefix(store.keys.host(rp_a))[0] == []


def test_a_live_move_whose_destination_libvirtd_dies_mid_copy_leaves_it_on_the_source(
        hosts, computes, schedule_config, start_controller, store, placement, run_schedule,
        test_guest_image):
    a, b = hosts["a"], hosts["b"]
    # Slow enough to be half way when the destination dies (128 MiB of memory at 4 MiB/s).
    computes.configs["a"] = deep_merge(computes.configs["a"], {"driver": {"libvirt": {
        "migration": {"bandwidth_mib_per_second": 4}}}})
    start_all(computes, store, start_controller, schedule_config)
    rp_a, rp_b = computes.rp("a"), computes.rp("b")
    uuid, marker = counting_guest(store, placement, computes, hosts, test_guest_image)
    ip = records.find(store, uuid)[1].record["ip"]

    seen: dict[str, str] = {}
    killed = threading.Event()

    def kill_b_half_way() -> None:
        """When the migration consumer holds a and the guest's memory is crossing."""
        def crossing() -> bool:
            migration = migrations.read(store, uuid)[0]
            if migration is not None:
                seen.setdefault("migration", migration["id"])
            with contextlib.suppress(libvirt.libvirtError):
                connection = a.connection()
                try:
                    stats = connection.lookupByName(uuid).jobStats()
                finally:
                    connection.close()
                return stats.get("memory_processed", 0) > 8 << 20
            return False

        wait_for(crossing, 600, interval=0.1, what="the guest's memory crossing")
        b.libvirtd.kill()
        killed.set()

    killer = threading.Thread(target=kill_b_half_way, daemon=True)
    killer.start()
    moved = run_schedule("migrate", uuid, "--live", "--wait", timeout=900)
    killer.join(5)
    assert killed.is_set(), moved.stdout + moved.stderr
    b.libvirtd.restart()

    assert moved.code == 1, moved.stdout + moved.stderr
    (line,) = moved.stderr.strip().splitlines()
    assert line.startswith(f"schedule.py: error: move of {uuid} failed: ") and \
        "the guest runs on here" in line, (line, moved.stdout, events.read(store, rp_a, uuid))
    # One copy, on a, counting on as the same boot with its disk; its keys and address.
    assert a.domain_active(uuid)
    seen_tick = max(ticks(a.console(uuid)))
    wait_for(lambda: max(ticks(a.console(uuid))) > seen_tick + 10, 30, interval=0.2,
             what="the guest counting on at the source")
    assert a.console(uuid).count("ETCD-COMPUTE-GUEST boot") == 1
    wait_for(lambda: a.console(uuid).count(f"marker read {marker}") >= 1, 30, interval=0.2,
             what="the marker read on a")
    host, read = records.find(store, uuid)
    assert (host, read.state, read.record["ip"]) == (rp_a, "ACTIVE", ip)
    # Claims as before the move: a alone, the migration consumer gone.
    wait_for(lambda: migrations.read(store, uuid) == (None, None), 60,
             what="the move given up")
    assert set(placement.get_allocations(uuid)["allocations"]) == {rp_a}
    assert placement.get_allocations(seen["migration"])["allocations"] == {}
    assert placement.get_usages(rp_b)["VCPU"] == 0
    # Nothing of it on b once its libvirtd is back: no domain, no qemu, no files, no keys.
    wait_for(lambda: not b.has_domain(uuid) and not qemu_pids(b.instances_dir / uuid) and
             not (b.instances_dir / uuid).exists() and
             store.get_prefix(store.keys.host(rp_b))[0] == [], 120,
             what="b to keep nothing of the guest")

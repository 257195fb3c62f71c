"""Real TCG guests moved between two hypervisor hosts, each with its own libvirtd on TLS
(tests/virt/hypervisors.py): live with the local disk copied, cold through libvirt's
storage API, cut short by a dead destination or a cancel, refused by a libvirtd that
is not the cluster's. What runs where is read from both libvirtds and both consoles."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

import pytest

from etcd_compute.virt.domain import mac_addresses
from tests.support import wait_for
from tests.virt.hypervisors import (
    ConsoleClock,
    Hypervisors,
    counter_spec,
    ticks,
)
from tools.local_services.netns import netns_usable

pytestmark = pytest.mark.vm

BOOT_SECONDS = 240


@pytest.fixture(scope="module")
def hosts() -> Iterator[Hypervisors]:
    why = netns_usable()
    if why:
        pytest.fail(f"two hypervisor hosts need network namespaces: {why}")
    with Hypervisors.create(["a", "b"]) as made:
        yield made


def boot_counter(hosts: Hypervisors, name: str, image: Path) -> tuple[dict, str]:
    """A counting guest on host `name`, its marker written and a few ticks out."""
    spec = counter_spec(image)
    host = hosts[name]
    host.driver().build(spec)
    uuid = spec["uuid"]
    found = wait_for(lambda: re.search(r"marker written (MARKER-\S+)", host.console(uuid)),
                     BOOT_SECONDS, interval=0.5, what="the guest's marker written")
    wait_for(lambda: len(ticks(host.console(uuid))) >= 5, 60, interval=0.2,
             what="the guest counting")
    return spec, found.group(1)


def macs_of(host, uuid: str) -> list[str]:
    connection = host.connection()
    try:
        return mac_addresses(connection.lookupByName(uuid))
    finally:
        connection.close()


def test_a_running_guest_moves_live_with_its_disk_console_and_identity(hosts,
                                                                       test_guest_image):
    a, b = hosts["a"], hosts["b"]
    spec, marker = boot_counter(hosts, "a", test_guest_image)
    uuid = spec["uuid"]
    macs = macs_of(a, uuid)
    target = b.driver().prepare_incoming(spec)
    reports: list[dict] = []
    source_log = a.instances_dir / uuid / "console.log"
    with ConsoleClock([source_log, b.instances_dir / uuid / "console.log"]) as clock:
        result = a.driver().live_migrate(uuid, target, progress=reports.append)
        wait_for(lambda: len(ticks(b.console(uuid))) >= 20, 60, interval=0.2,
                 what="the guest counting on b")
    # Exactly one copy, on b; nothing of it left on a.
    assert b.domain_active(uuid) and not a.has_domain(uuid)
    assert not (a.instances_dir / uuid).exists()
    # The same guest, not a new boot: the counter goes on from where it was on a (whose
    # console came along as b's history).
    on_b = b.console(uuid)
    history = (b.instances_dir / uuid / "console.history.log").read_text()
    assert "ETCD-COMPUTE-GUEST boot" not in on_b and f"marker written {marker}" in history
    assert ticks(on_b)[0] == ticks(history)[-1] + 1, (ticks(history)[-3:], ticks(on_b)[:3])
    # The disk came along: the marker written on a is read from b's disk.
    wait_for(lambda: f"marker read {marker}" in b.console(uuid), 30, interval=0.2,
             what="the marker read back on b")
    # Same MAC; the overlay there is on b's own copy of the base.
    assert macs_of(b, uuid) == macs
    # The console as published shows both.
    published = b.driver().console(uuid)
    assert f"marker written {marker}" in published and f"marker read {marker}" in published
    assert reports and reports[-1]["data_total"] > 0
    print(f"\nlive migration: {result['seconds']:.2f} s, libvirt's downtime "
          f"{result['downtime_ms']} ms, longest console silence {clock.longest_gap():.3f} s")
    assert result["downtime_ms"] is not None and result["downtime_ms"] < 2000
    b.driver().destroy(uuid)

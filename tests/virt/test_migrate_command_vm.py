"""`schedule.py migrate` with real guests: two hypervisor hosts, each in its network namespace
with its own libvirtd on TLS and its compute daemon (tests/virt/hypervisors.py), a
controller, real etcd and Placement. A guest printing a counter every 100 ms moves live
and keeps counting from the next number, reads back the marker it wrote on its disk,
keeps its address; Placement holds the destination only; nothing of it is left on the
source; the move's event says its downtime. Then it moves back cold and keeps its disk."""

from __future__ import annotations

import re
from collections.abc import Iterator

import pytest

from etcd_compute import events
from etcd_compute.config import deep_merge
from etcd_compute.instances import migrations, records
from tests.compute.helpers import claim_and_send, make_spec, wait_state
from tests.support import wait_for
from tests.virt.hypervisors import (
    COUNTER_SCRIPT,
    RESOURCES,
    hypervisors,
    not_booted_again,
    ticks,
)
from tools.local_services.hypervisors import GUEST_CIDR, Hypervisors

# Two hypervisors' libvirtds and TCG guests: 50-90 s each alone, several times that while
# other workers boot guests (the suite's 300 s is for one step's hang).
pytestmark = [pytest.mark.vm, pytest.mark.timeout(600)]


@pytest.fixture
def hosts() -> Iterator[Hypervisors]:
    with hypervisors(["a", "b"]) as made:
        yield made


def counting_guest(store, placement, computes, hosts, image) -> tuple[str, str]:
    uuid = send_counting_guest(store, placement, computes, image)
    return uuid, counting_on_a(store, hosts, uuid)


def send_counting_guest(store, placement, computes, image) -> str:
    """A counting guest claimed on host a and sent there (not waited for)."""
    rp_a = computes.rp("a")
    gateway = GUEST_CIDR.rsplit(".", 1)[0] + ".1"
    spec = make_spec(rp_a, image=f"file://{image}", resources=dict(RESOURCES),
                     allocations={rp_a: {"resources": RESOURCES}},
                     user_data=COUNTER_SCRIPT.replace("GATEWAY", gateway))
    claim_and_send(store, placement, spec)
    return spec["uuid"]


def counting_on_a(store, hosts, uuid: str) -> str:
    """Once the guest is ACTIVE on a, has written its marker and counts: the marker."""
    wait_state(store, uuid, "ACTIVE", timeout=300)
    found = wait_for(lambda: re.search(r"marker written (MARKER-\S+)",
                                       hosts["a"].console(uuid)), 180, interval=0.5,
                     what="the guest's marker written")
    wait_for(lambda: len(ticks(hosts["a"].console(uuid))) >= 5, 60, interval=0.2,
             what="the guest counting")
    return found.group(1)


def test_a_guest_moves_live_with_schedule_py_and_back_cold_keeping_its_disk(
        hosts, computes, schedule_config, start_controller, store, placement, run_schedule,
        test_guest_image):
    a, b = hosts["a"], hosts["b"]
    start_controller(deep_merge(schedule_config, {"scheduler": {"controller_lease_ttl": 3}}))
    for name in ("a", "b"):
        computes.start(name)
        wait_for(lambda n=name: store.get(store.keys.alive(computes.rp(n))), 60,
                 what=f"host {name}'s heartbeat")
    wait_for(lambda: store.get(store.keys.leader()), 30, what="a controller to lead")
    rp_a, rp_b = computes.rp("a"), computes.rp("b")
    uuid, marker = counting_guest(store, placement, computes, hosts, test_guest_image)
    address = records.find(store, uuid)[1].record["ip"]

    moved = run_schedule("migrate", uuid, "--live", "--wait", timeout=600)
    assert moved.code == 0, moved.stdout + moved.stderr
    assert "MOVED TO host-b" in moved.stdout
    # One copy, on b, counting on from where it was; the disk came along.
    assert b.domain_active(uuid) and not a.has_domain(uuid)
    assert not (a.instances_dir / uuid).exists()
    history = (b.instances_dir / uuid / "console.history.log").read_text()
    wait_for(lambda: len(ticks(b.console(uuid))) >= 3, 60, interval=0.2,
             what="the guest counting on b")
    assert ticks(b.console(uuid))[0] == ticks(history)[-1] + 1
    not_booted_again(b.console(uuid), "b")
    wait_for(lambda: f"marker read {marker}" in b.console(uuid), 30, interval=0.2,
             what="the marker read back on b")
    # Its keys, its claim and its address are b's; no move left over.
    host, read = records.find(store, uuid)
    assert (host, read.state, read.record["ip"]) == (rp_b, "ACTIVE", address)
    assert set(placement.get_allocations(uuid)["allocations"]) == {rp_b}
    assert placement.get_usages(rp_a)["VCPU"] == 0
    assert migrations.read(store, uuid) == (None, None)
    event = [e for e in events.read(store, rp_b, uuid) if e["action"] == "migrate"][-1]
    assert event["result"] == "success" and "downtime" in event["detail"], event
    print(f"\nlive move through schedule.py: {event['detail']}")

    back = run_schedule("migrate", uuid, "--wait", timeout=600)
    assert back.code == 0, back.stdout + back.stderr
    wait_for(lambda: f"marker found {marker}" in a.console(uuid), 240, interval=0.5,
             what="the guest on a finding its marker after the cold move")
    host, read = records.find(store, uuid)
    assert (host, read.state) == (rp_a, "ACTIVE")
    assert set(placement.get_allocations(uuid)["allocations"]) == {rp_a}
    wait_for(lambda: not b.has_domain(uuid) and not (b.instances_dir / uuid).exists(), 60,
             what="its stopped copy on b removed")
    assert run_schedule("destroy", uuid, "--wait", timeout=120).code == 0
    assert placement.get_allocations(uuid)["allocations"] == {}

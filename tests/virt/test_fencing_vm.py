"""The compute daemon of a host with a running guest killed (SIGKILL: its guest runs on, its
libvirtd answers) while the controller runs: the controller fences the host through its
libvirtd over TLS, the guest there is destroyed before its copy starts on the other host,
and the recovery comes once the lease is gone and the fence done (TTL + the fence + the
controller's steps), not after TTL + grace.

Two hypervisor hosts on this machine, each in its network namespace with its own
libvirtd on TLS (tests/virt/hypervisors.py) and its compute daemon there; the controller
in the root namespace holds a libvirt client certificate of the cluster. When each guest
ran is read from both consoles by the host's clock.
"""

from __future__ import annotations

import re
import time
from collections.abc import Iterator

import pytest

from etcd_compute import events
from etcd_compute.config import deep_merge
from tests.compute.helpers import claim_and_send, make_spec, record, wait_state
from tests.support import wait_for
from tests.virt.hypervisors import (
    COUNTER_SCRIPT,
    RESOURCES,
    LineClock,
    hypervisors,
    ticks,
)
from tools.local_services.hypervisors import GUEST_CIDR, Hypervisors

# Two hypervisors' libvirtds and TCG guests: 50-90 s each alone, several times that while
# other workers boot guests (the suite's 300 s is for one step's hang).
pytestmark = [pytest.mark.vm, pytest.mark.timeout(600)]

GRACE = 60  # long: a recovery sooner than TTL + GRACE came from the fence
FENCE_TIMEOUT = 15  # scheduler.fencing.libvirt_timeout_seconds: the fence helper dies then
# After the fence, the controller's own steps: its next recovery tick (0.2 s), the rebuild's
# claim and etcd transaction; seconds on a loaded machine, far below GRACE.
CONTROLLER_STEPS = 10


@pytest.fixture
def hosts() -> Iterator[Hypervisors]:
    with hypervisors(["a", "b"]) as made:
        yield made


def test_a_host_whose_compute_died_is_fenced_through_libvirt_before_its_guest_runs_again(
        hosts, computes, schedule_config, start_controller, store, placement,
        test_guest_image, tmp_path):
    a, b = hosts["a"], hosts["b"]
    controller_pki = hosts.pki.issue_libvirt("controller", hosts.root / "controller-pki",
                                             client_only=True)
    start_controller(deep_merge(schedule_config, {"scheduler": {
        "host_failure_grace_seconds": GRACE, "controller_lease_ttl": 3,
        "fencing": {"libvirt_pki_dir": str(controller_pki),
                    "libvirt_timeout_seconds": FENCE_TIMEOUT}}}))
    for name in ("a", "b"):
        computes.start(name)
        wait_for(lambda n=name: store.get(store.keys.alive(computes.rp(n))), 60,
                 what=f"host {name}'s heartbeat")
    wait_for(lambda: store.get(store.keys.leader()), 30, what="a controller to lead")
    ttl = computes.configs["a"]["compute"]["heartbeat_ttl"]

    rp_a, rp_b = computes.rp("a"), computes.rp("b")
    gateway = GUEST_CIDR.rsplit(".", 1)[0] + ".1"
    spec = make_spec(rp_a, image=f"file://{test_guest_image}",
                     resources=dict(RESOURCES), allocations={rp_a: {"resources": RESOURCES}},
                     on_host_failure="rebuild",
                     user_data=COUNTER_SCRIPT.replace("GATEWAY", gateway))
    uuid = spec["uuid"]
    claim_and_send(store, placement, spec)
    wait_state(store, uuid, "ACTIVE", timeout=300)
    wait_for(lambda: len(ticks(a.console(uuid))) >= 10, 120, interval=0.2,
             what="the guest counting on a")

    consoles = {"a": a.instances_dir / uuid / "console.log",
                "b": b.instances_dir / uuid / "console.log"}
    with LineClock(consoles) as clock:
        killed = time.monotonic()
        computes.kill9("a")  # the daemon only: its guest runs on, its libvirtd answers
        assert a.domain_active(uuid)
        # Waits past TTL + grace: a recovery by the grace alone is seen, and fails below.
        moved = wait_for(lambda: (record(store, uuid) or {}).get("host") == rp_b and
                         time.monotonic(), ttl + GRACE + 30, interval=0.05,
                         what="the controller to recover the instance on b")
        destroyed_first = not a.domain_active(uuid)
        wait_state(store, uuid, "ACTIVE", timeout=300)
        wait_for(lambda: len(ticks(b.console(uuid))) >= 5, 180, interval=0.2,
                 what="the guest counting again on b")
    recovery = moved - killed
    print(f"\nrecovery through libvirt fencing: {recovery:.1f} s after the kill (TTL {ttl} s "
          f"+ grace {GRACE} s without it); a's guest last wrote "
          f"{clock.first['b'] - clock.last['a']:.2f} s before b's first wrote")

    # Fenced through libvirt: a's guest was off before the instance moved, and never ran
    # again; b's copy wrote its first line after a's wrote its last.
    assert destroyed_first and not a.domain_active(uuid) and a.has_domain(uuid)
    assert clock.last["a"] < clock.first["b"], (clock.last, clock.first)
    recovered = [e for e in events.read(store, rp_b, uuid) if e["action"] == "recover"][-1]
    assert "its host fenced (1 guest(s) destroyed through its libvirtd)" in \
        recovered["detail"], recovered
    # "A host fenced either way is recovered at once" (docs/explanation/host-failure.md): its
    # lease gone (at most TTL after the kill: the last renewal came before it), the fence
    # (bounded by its timeout), then the controller's steps; nothing waits for the grace.
    fenced_in = float(re.search(r"after ([0-9.]+) s", recovered["detail"]).group(1))
    assert fenced_in < FENCE_TIMEOUT, recovered
    assert recovery < ttl + fenced_in + CONTROLLER_STEPS, (recovery, fenced_in)
    assert set(placement.get_allocations(uuid)["allocations"]) == {rp_b}

"""A compute killed with SIGKILL while its real guest runs: rebuilt on the other host, and
the stale copy destroyed when the killed compute comes back.

Two hypervisor hosts on this machine, each in its network namespace with its own libvirtd,
NAT network and metadata server, and its compute daemon there reaching etcd and Placement
through forwarders (tests/virt/hypervisors.py): no fixed name of the machine's, so this
runs beside the other workers' guests instead of in the serial "guests" group. A
SIGKILLed daemon cannot fence: libvirt keeps its guest running (docs/explanation/
host-failure.md), so until A's compute returns two copies run; it then destroys its own.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from etcd_compute import messages
from etcd_compute.virt import network
from etcd_compute.virt.domain import mac_addresses
from tests.compute.helpers import claim_and_send, make_spec, record, wait_state
from tests.compute.test_host_failure import fast_controller
from tests.support import wait_for
from tests.virt.hypervisors import hypervisors
from tools.local_services.hypervisors import GUEST_NETWORK, Hypervisor, Hypervisors

# Two hypervisors' libvirtds and a TCG guest booted twice: the suite's 300 s is for one
# step's hang.
pytestmark = [pytest.mark.vm, pytest.mark.timeout(600)]

RESOURCES = {"VCPU": 1, "MEMORY_MB": 128, "DISK_GB": 1}


@pytest.fixture
def hosts() -> Iterator[Hypervisors]:
    with hypervisors(["a", "b"]) as made:
        yield made


def leased(host: Hypervisor, uuid: str) -> str | None:
    """The address `host`'s own DHCP has leased to the guest's MAC there."""
    connection = host.connection()
    try:
        (mac,) = mac_addresses(connection.lookupByName(uuid), GUEST_NETWORK)
        return network.lease_ip(connection.networkLookupByName(GUEST_NETWORK), mac)
    finally:
        connection.close()


def test_a_sigkilled_compute_s_guest_is_rebuilt_elsewhere_and_its_stale_copy_destroyed(
        hosts, computes, test_guest_image, start_controller, schedule_config, store, placement,
        run_schedule):
    a, b = hosts["a"], hosts["b"]
    rp_a, rp_b = computes.rp("a"), computes.rp("b")
    controller = start_controller(fast_controller(schedule_config))
    try:
        for name in ("a", "b"):
            computes.start(name)
            wait_for(lambda n=name: store.get(store.keys.alive(computes.rp(n))), 60,
                     what=f"host {name}'s heartbeat")
        spec = make_spec(rp_a, image=f"file://{test_guest_image}",
                         resources=dict(RESOURCES),
                         allocations={rp_a: {"resources": dict(RESOURCES)}},
                         on_host_failure="rebuild")
        claim_and_send(store, placement, spec)
        uuid = spec["uuid"]
        wait_state(store, uuid, "ACTIVE", timeout=240)
        assert a.domain_active(uuid)

        computes.kill9("a")  # the daemon only: libvirt keeps the guest running
        assert a.domain_active(uuid)
        wait_for(lambda: (record(store, uuid) or {}).get("host") == rp_b, 60,
                 what="the controller to rebuild it on host B")
        rebuilt = wait_state(store, uuid, "ACTIVE", timeout=300)
        # B's own DHCP gave it the address the record holds.
        assert rebuilt["host"] == rp_b and rebuilt["ip"] == leased(b, uuid)
        assert b.domain_active(uuid)
        assert set(placement.get_allocations(uuid)["allocations"]) == {rp_b}
        assert placement.get_usages(rp_a)["VCPU"] == 0

        # Two copies run now (the SIGKILL case); A's compute comes back and ends its own.
        assert a.domain_active(uuid)
        computes.start("a")
        wait_for(lambda: not a.domain_active(uuid), 60, what="the stale guest destroyed")
        # Destroyed, then undefined: a second step (a run once looked in between).
        wait_for(lambda: not a.has_domain(uuid), 30, what="the stale guest undefined")
        wait_for(lambda: not (a.instances_dir / uuid).exists(), 30,
                 what="its disk and files removed")

        # The one copy left is B's: it booted there and read its own identity from B's
        # metadata server; A's claim was never touched.
        def console() -> str:
            published, _ = store.read(messages.CONSOLE, store.keys.console(rp_b, uuid))
            return published["text"] if published else ""

        wait_for(lambda: f"metadata instance-id={uuid}" in console(), 180, interval=0.5,
                 what="the rebuilt guest to read its metadata on host B")
        assert b.domain_active(uuid) and not a.domain_active(uuid)
        assert set(placement.get_allocations(uuid)["allocations"]) == {rp_b}
        assert store.get(store.keys.spec(rp_a, uuid)) is None

        assert run_schedule("destroy", uuid).code == 0
        wait_state(store, uuid, "DELETED", timeout=60)
        assert not b.domain_active(uuid)
        assert placement.get_allocations(uuid)["allocations"] == {}
    finally:
        # The controller first: with it gone, stopping host B recovers nothing onto A (the
        # computes and hosts go after, in the fixtures).
        controller.stop()

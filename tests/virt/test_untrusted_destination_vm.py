"""`schedule.py migrate` to a destination whose libvirtd is not who it should be, with a real
guest: three hypervisor hosts, each in its network namespace with its own libvirtd on TLS
and its compute daemon (tests/virt/hypervisors.py), a controller, real etcd and Placement.
Host b's libvirtd presents a certificate of the cluster's CA for another host (a's
address); host c's, one for its own address from another CA. A live move of a's counting
guest to either is refused when the source connects: the guest counts on at a as the
same boot, Placement holds a alone (no migration consumer left), the destination keeps
nothing of it, and the operator reads why in one line."""

from __future__ import annotations

import grp
import ipaddress
from collections.abc import Iterator

import pytest

from etcd_compute.config import deep_merge
from etcd_compute.instances import migrations, records
from etcd_compute.pki import Pki
from tests.support import wait_for
from tests.virt.hypervisors import hypervisors, ticks
from tests.virt.test_migrate_command_vm import counting_guest
from tools.local_services.hypervisors import QEMU_GROUP, Hypervisors

# Two hypervisors' libvirtds and TCG guests: 50-90 s each alone, several times that while
# other workers boot guests (the suite's 300 s is for one step's hang).
pytestmark = [pytest.mark.vm, pytest.mark.timeout(600)]


@pytest.fixture
def hosts() -> Iterator[Hypervisors]:
    with hypervisors(["a"]) as made:
        gid = grp.getgrnam(QEMU_GROUP).gr_gid
        net = ipaddress.IPv4Network(made.net.subnet)
        # Host addresses are given in order from the subnet's third: a, b, c.
        impostor = made.pki.issue_libvirt("hva", made.root / "pki-b-as-a",
                                          ips=[made["a"].address], qemu_group=gid)
        made.add("b", pki_dir=impostor)
        stranger = Pki(made.root / "other-ca")
        stranger.init(cluster="another")
        foreign = stranger.issue_libvirt("hvc", made.root / "pki-c-foreign",
                                         ips=[str(net.network_address + 4)], qemu_group=gid)
        assert made.add("c", pki_dir=foreign).address == str(net.network_address + 4)
        yield made


def test_a_move_to_a_libvirtd_with_another_host_s_or_another_ca_s_certificate_is_refused(
        hosts, computes, schedule_config, start_controller, store, placement, run_schedule,
        test_guest_image):
    a = hosts["a"]
    start_controller(deep_merge(schedule_config, {"scheduler": {"controller_lease_ttl": 3}}))
    for name in ("a", "b", "c"):
        computes.start(name)
        wait_for(lambda n=name: store.get(store.keys.alive(computes.rp(n))), 60,
                 what=f"host {name}'s heartbeat")
    wait_for(lambda: store.get(store.keys.leader()), 30, what="a controller to lead")
    rp_a = computes.rp("a")
    uuid, marker = counting_guest(store, placement, computes, hosts, test_guest_image)
    ip = records.find(store, uuid)[1].record["ip"]

    # libvirt's client says no more than this for either (its log says which: the
    # certificate's owner is not the host called, or it has no known issuer).
    for name in ("b", "c"):
        there = hosts[name]
        moved = run_schedule("migrate", uuid, "--live", "--host", f"host-{name}", "--wait",
                             timeout=600)
        assert moved.code == 1, moved.stdout + moved.stderr
        (line,) = moved.stderr.strip().splitlines()
        print(f"\nto host-{name}: {line}")
        assert line == (f"schedule.py: error: move of {uuid} failed: libvirtd of "
                        f"{there.address}: authentication failed: Failed to verify peer's "
                        "certificate"), line
        # One copy, on a, counting on as the same boot; its keys, address and claim a's.
        assert a.domain_active(uuid) and not there.has_domain(uuid)
        seen = max(ticks(a.console(uuid)))
        wait_for(lambda s=seen: max(ticks(a.console(uuid))) > s + 10, 30, interval=0.2,
                 what="the guest counting on at a")
        assert a.console(uuid).count("ETCD-COMPUTE-GUEST boot") == 1
        host, read = records.find(store, uuid)
        assert (host, read.state, read.record["ip"]) == (rp_a, "ACTIVE", ip)
        assert migrations.read(store, uuid) == (None, None)
        assert set(placement.get_allocations(uuid)["allocations"]) == {rp_a}
        rp = computes.rp(name)
        assert placement.get_usages(rp)["VCPU"] == 0
        wait_for(lambda r=rp, t=there: store.get_prefix(store.keys.host(r))[0] == [] and
                 not (t.instances_dir / uuid).exists(), 60,
                 what=f"host-{name} to keep nothing of it")
    wait_for(lambda: f"marker read {marker}" in a.console(uuid), 30, interval=0.2,
             what="the marker read on a")
    assert placement.get_usages(rp_a)["VCPU"] == 1  # the instance alone, nothing left over

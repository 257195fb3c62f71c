"""Two computes of different network backends, real Placement and etcd: each advertises its
backend's trait, and a request goes only to a host of the scheduler's own backend.

The hosts run the fake driver and there is no Neutron here: the neutron scheduler's
requests ask for no network (`--no-network`), so the neutron host builds them without
ports, as it would for the compute API's `networks: none`, and they keep their claims
(a build that needed Neutron would fail and free its claim, and the host never fills)."""

from __future__ import annotations

import re

from etcd_compute.config import deep_merge
from etcd_compute.network_backend import LIBVIRT, NEUTRON, trait_of
from tests.compute.helpers import wait_state
from tests.support import wait_for

QUERY = "resources=VCPU:1,MEMORY_MB:256,DISK_GB:1"


def test_a_request_goes_only_to_a_host_of_the_schedulers_network_backend(
        host_config, start_compute, store, placement, schedule_config, write_yaml,
        run_schedule):
    hosts = {}
    for backend in (LIBVIRT, NEUTRON):
        config = host_config(f"{backend}-host", network={"backend": backend})
        start_compute(config, name=f"{backend}-host")
        hosts[backend] = config["compute"]["uuid"]
    for backend, rp in hosts.items():
        wait_for(lambda rp=rp: store.get(store.keys.alive(rp)), what="heartbeat")
        other = NEUTRON if backend == LIBVIRT else LIBVIRT
        traits = wait_for(lambda rp=rp, backend=backend: (
            lambda t: t if trait_of(backend) in t else None)(placement.get_traits(rp)),
            what="the backend's trait")
        assert trait_of(other) not in traits

    for backend, rp, count in ((LIBVIRT, hosts[LIBVIRT], 3), (NEUTRON, hosts[NEUTRON], 4)):
        path = write_yaml(f"schedule-{backend}.yaml",
                          deep_merge(schedule_config, {"network": {"backend": backend}}))
        # The other host had room for them too (4 VCPU each).
        no_network = ["--no-network"] if backend == NEUTRON else []
        run = run_schedule(QUERY, "--count", str(count), *no_network, config=path)
        assert run.code == 0, run.stderr
        targets = re.findall(r"^NOTIFIED TARGET, (\S+), OF INSTANCE", run.stdout, re.M)
        assert targets == [rp] * count, run.stdout
    # The neutron host's builds settled, ACTIVE with their claims (none freed by a failure).
    for uuid in re.findall(r"OF INSTANCE (\S+)$", run.stdout, re.M):
        assert wait_state(store, uuid, "ACTIVE", "ERROR", timeout=60)["state"] == "ACTIVE"
    # The neutron host is full; the libvirt host's room is not for a neutron scheduler.
    run = run_schedule(QUERY, "--no-network", config=path)
    assert run.code != 0 and "NO ALLOCATIONS LEFT" in run.stdout + run.stderr, run.stdout
    assert f"root_required={trait_of(NEUTRON)}: no host" in run.stdout + run.stderr

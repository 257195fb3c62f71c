"""Recovery paths that need a hand on the daemon's internals, on real services."""

from __future__ import annotations

import threading
from typing import Any

from etcd_compute.compute.identity import HostIdentity
from etcd_compute.compute.inventory import build_inventory
from etcd_compute.compute.service import ComputeService
from etcd_compute.placement import PlacementClient
from tests.compute.helpers import claim_and_send, make_spec, wait_state
from tests.support import wait_for


def test_inventory_update_survives_generation_conflicts(placement: PlacementClient,
                                                        placement_config):
    rp = "5d3f1a2b-0c4d-4e5f-8a9b-0c1d2e3f4a5b"
    placement.ensure_provider(rp, "generation-race")
    inventory = build_inventory({"VCPU": 4, "MEMORY_MB": 1024, "DISK_GB": 10}, {})
    placement.set_inventory(rp, inventory)
    real_get = placement.get
    stale = {"calls": 0}

    def get_racing(path: str, **params: Any) -> dict[str, Any]:
        # Another writer changes the provider between our read and our write, twice.
        read = real_get(path, **params)
        if path.endswith("/inventories"):
            stale["calls"] += 1
            if stale["calls"] <= 2:
                other = PlacementClient(placement_config)
                other.set_traits(rp, {f"CUSTOM_RACE_{stale['calls']}"})
        return read

    placement.get = get_racing  # type: ignore[method-assign]
    bigger = build_inventory({"VCPU": 8, "MEMORY_MB": 1024, "DISK_GB": 10}, {})
    placement.set_inventory(rp, bigger)
    assert stale["calls"] == 3  # two conflicts, then success
    assert placement.conflicts == 2
    # Written again as it is (a restart) while the generation keeps moving: read, not sent.
    stale["calls"] = 0
    placement.set_inventory(rp, bigger)
    assert stale["calls"] == 1 and placement.conflicts == 2
    placement.get = real_get  # type: ignore[method-assign]
    assert placement.get_inventories(rp)["VCPU"]["total"] == 8


def test_compacted_history_triggers_reconcile(compute_config, store, placement, caplog):
    identity = HostIdentity(compute_config["compute"]["uuid"], compute_config["compute"]["name"])
    service = ComputeService(compute_config, [identity])
    service.registration.register()
    service.pool.start()
    try:
        specs = [make_spec(identity.uuid) for _ in range(3)]
        for spec in specs:
            claim_and_send(store, placement, spec)
        _, revision = store.get_prefix(store.keys.hosts())
        store.client.compact(revision)
        # As if the daemon had been away since revision 1: the watch cannot resume there.
        service.next_revision = 1
        threading.Thread(target=service.watch_loop, daemon=True).start()
        main = threading.Thread(target=service.main_loop, daemon=True)
        main.start()
        for spec in specs:
            wait_state(store, spec["uuid"], "ACTIVE")
        assert service.next_revision > revision
        assert "past 1 where this watch resumes; reading everything again" in caplog.text
    finally:
        service.stop()
        service.pool.stop()
        service.store.close()


def test_finished_job_survives_an_etcd_blip_while_recording_it(compute_config, store,
                                                               placement):
    from etcd_compute.errors import ServiceUnavailable

    identity = HostIdentity(compute_config["compute"]["uuid"], compute_config["compute"]["name"])
    service = ComputeService(compute_config, [identity])
    service.registration.register()
    service.pool.start()
    real_finish = service.machine.ends.finish_build
    calls = []

    def finish_build_once_unreachable(job, result):
        calls.append(job.uuid)
        if len(calls) == 1:
            raise ServiceUnavailable("etcd at test is unreachable (UNAVAILABLE)")
        real_finish(job, result)

    service.machine.ends.finish_build = finish_build_once_unreachable  # type: ignore[method-assign]
    try:
        service.reconcile()  # as `run` does: the watch resumes from the revision it read
        threading.Thread(target=service.watch_loop, daemon=True).start()
        threading.Thread(target=service.main_loop, daemon=True).start()
        spec = make_spec(identity.uuid)
        claim_and_send(store, placement, spec)
        wait_state(store, spec["uuid"], "ACTIVE")
        # The blip happened, and the same finished job was recorded on the retry.
        assert calls == [spec["uuid"], spec["uuid"]]
        # The record turns ACTIVE just before the worker lets go of the job.
        wait_for(lambda: spec["uuid"] not in service.machine.jobs, 5,
                 what="the finished job is forgotten")
    finally:
        service.stop()
        service.pool.stop()
        service.store.close()

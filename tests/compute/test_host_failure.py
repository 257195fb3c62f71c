"""When a host dies or is cut off: self-fencing, recovery elsewhere, clean-up on return.

Real etcd (TLS, RBAC), Placement, compute daemons and a controller as processes;
the fake driver logs every guest start and stop, so the tests check that no
instance ever ran on two hosts at overlapping times.
"""

from __future__ import annotations

import time

from etcd_compute.config import deep_merge
from etcd_compute.instances import records
from tests.compute.guests import overlaps, power_loss
from tests.compute.helpers import (
    claim_and_send,
    fake_instances,
    make_spec,
    record,
    wait_state,
)
from tests.support import wait_for
from tools.local_services.proxy import CuttableProxy

GRACE = 2


def rp_of(config):
    return config["compute"]["uuid"]


def fast_controller(schedule_config, grace=GRACE):
    return deep_merge(schedule_config, {"scheduler": {"host_failure_grace_seconds": grace,
                                                      "controller_lease_ttl": 3}})


def two_hosts_and_a_controller(start_compute, start_controller, compute_config, host_config,
                               schedule_config, store, a_config=None, grace=GRACE):
    a = a_config or compute_config
    b = host_config("host-b")
    start_controller(fast_controller(schedule_config, grace))
    computes = {rp_of(a): start_compute(a, name="host-a"),
                rp_of(b): start_compute(b, name="host-b")}
    for config in (a, b):
        wait_for(lambda c=config: store.get(store.keys.alive(rp_of(c))), 30, what="heartbeats")
    wait_for(lambda: store.get(store.keys.leader()), 20, what="a controller to lead")
    return a, b, computes


def instance_on(store, placement, host_config, **extra):
    spec = make_spec(rp_of(host_config), **extra)
    claim_and_send(store, placement, spec)
    wait_state(store, spec["uuid"], "ACTIVE")
    return spec


def test_a_dead_hosts_instances_are_rebuilt_elsewhere_or_end_in_error(
        start_compute, start_controller, compute_config, host_config, schedule_config, store,
        placement):
    a, b, computes = two_hosts_and_a_controller(start_compute, start_controller,
                                                compute_config, host_config, schedule_config,
                                                store)
    rebuilt = instance_on(store, placement, a, on_host_failure="rebuild")
    errored = instance_on(store, placement, a, on_host_failure="error")
    killed_at = time.monotonic()
    computes[rp_of(a)].kill9()
    power_loss(a)  # the machine went with it
    moved = wait_state(store, rebuilt["uuid"], "ACTIVE", timeout=30)
    while record(store, rebuilt["uuid"])["host"] != rp_of(b):
        assert time.monotonic() - killed_at < 30, "not rebuilt on host-b"
        time.sleep(0.1)
        moved = record(store, rebuilt["uuid"])
    recovery = time.monotonic() - killed_at
    wait_state(store, rebuilt["uuid"], "ACTIVE", timeout=30)
    failed = wait_state(store, errored["uuid"], "ERROR", timeout=30)
    assert failed["error"] == f"host {rp_of(a)} is down"
    # ERROR is written first, the claim freed right after.
    wait_for(lambda: placement.get_allocations(errored["uuid"])["allocations"] == {}, 5,
             what="the errored instance's claim to be freed")
    assert set(placement.get_allocations(rebuilt["uuid"])["allocations"]) == {rp_of(b)}
    assert placement.get_usages(rp_of(a))["VCPU"] == 0
    assert placement.get_usages(rp_of(b))["VCPU"] == 1
    # Lease TTL 3 s + grace 2 s + a build: well under the time it took to notice at all.
    assert recovery < 3 + GRACE + 10, recovery
    del moved
    # The dead host comes back: it destroys its stale copy, touching no claim.
    start_compute(a, name="host-a-again")
    wait_for(lambda: rebuilt["uuid"] not in fake_instances(a), 30, what="stale copy destroyed")
    assert set(placement.get_allocations(rebuilt["uuid"])["allocations"]) == {rp_of(b)}
    assert store.get(store.keys.spec(rp_of(a), rebuilt["uuid"])) is None
    assert overlaps([a, b]) == []


def test_a_host_cut_off_fences_itself_before_its_instance_runs_elsewhere(
        start_compute, start_controller, compute_config, host_config, schedule_config, store,
        placement):
    host, port = compute_config["etcd"]["endpoints"][0].rsplit(":", 1)
    proxy = CuttableProxy(host, int(port)).start()
    try:
        a = deep_merge(compute_config, {"etcd": {"endpoints": [proxy.endpoint]}})
        a, b, computes = two_hosts_and_a_controller(
            start_compute, start_controller, compute_config, host_config, schedule_config,
            store, a_config=a)
        spec = instance_on(store, placement, a)
        proxy.cut()
        wait_for(lambda: "fenced: powered off 1 guest(s)" in computes[rp_of(a)].log(), 15,
                 what="host-a to fence itself")
        wait_for(lambda: (record(store, spec["uuid"]) or {}).get("host") == rp_of(b), 30,
                 what="the instance rebuilt on host-b")
        wait_state(store, spec["uuid"], "ACTIVE", timeout=30)
        assert computes[rp_of(a)].alive()
        proxy.restore()
        wait_for(lambda: spec["uuid"] not in fake_instances(a), 30,
                 what="host-a to destroy its stale copy on return")
        wait_for(lambda: store.get(store.keys.alive(rp_of(a))), 20, what="host-a back")
        assert records.locate(store, spec["uuid"])["host"] == rp_of(b)
        assert overlaps([a, b]) == []
    finally:
        proxy.stop()


def test_a_destroy_asked_while_the_host_is_dead_frees_the_claim(
        start_compute, start_controller, compute_config, host_config, schedule_config, store,
        placement, run_schedule):
    # The destroy must come while the controller still waits out the grace (past it, the
    # controller ends the instance in ERROR itself and the destroy finds nothing held): a
    # schedule.py takes seconds to start on a loaded machine, more than GRACE.
    a, b, computes = two_hosts_and_a_controller(start_compute, start_controller,
                                                compute_config, host_config, schedule_config,
                                                store, grace=60)
    spec = instance_on(store, placement, a, on_host_failure="error")
    computes[rp_of(a)].kill9()
    power_loss(a)
    wait_for(lambda: store.get(store.keys.alive(rp_of(a))) is None, 10, what="lease expiry")
    done = run_schedule("destroy", spec["uuid"])
    assert done.code == 0, done.stderr
    assert "its host is down" in done.stdout
    assert record(store, spec["uuid"])["state"] == "DELETED"
    assert placement.get_allocations(spec["uuid"])["allocations"] == {}
    start_compute(a, name="host-a-again")
    wait_for(lambda: spec["uuid"] not in fake_instances(a), 30, what="clean-up on return")


def test_a_standby_controller_takes_over_when_the_leader_dies_and_recovers_hosts(
        start_compute, start_controller, compute_config, host_config, schedule_config, store,
        placement):
    from etcd_compute import messages

    config = fast_controller(schedule_config)
    first = start_controller(config, name="controller-1")
    wait_for(lambda: store.get(store.keys.leader()), 20, what="a controller to lead")
    second = start_controller(config, name="controller-2")
    leader, _ = store.read(messages.CONTROLLER_LEADER, store.keys.leader())
    assert leader["pid"] == first.pid
    a, b = compute_config, host_config("host-b")
    computes = {rp_of(a): start_compute(a, name="host-a"),
                rp_of(b): start_compute(b, name="host-b")}
    for config_ in (a, b):
        wait_for(lambda c=config_: store.get(store.keys.alive(rp_of(c))), 30, what="heartbeats")
    spec = instance_on(store, placement, a, on_host_failure="rebuild")

    killed = time.monotonic()
    first.kill9()

    def new_leader() -> bool:
        now, _ = store.read(messages.CONTROLLER_LEADER, store.keys.leader())
        return bool(now) and now["pid"] == second.pid

    wait_for(new_leader, 15, what="the standby to lead")
    takeover = time.monotonic() - killed
    assert takeover < 3 + 2, takeover  # its lease TTL (3 s), plus a campaign tick

    computes[rp_of(a)].kill9()
    power_loss(a)
    wait_for(lambda: (record(store, spec["uuid"]) or {}).get("host") == rp_of(b), 30,
             what="the new leader to rebuild it on host-b")
    wait_state(store, spec["uuid"], "ACTIVE", timeout=30)
    assert overlaps([a, b]) == []

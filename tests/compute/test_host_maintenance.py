"""An operator takes a host out of service: disable, show, drain, enable (real services)."""

from __future__ import annotations

from etcd_compute.placement import DISABLED_TRAIT
from tests.compute.guests import overlaps
from tests.compute.helpers import record, wait_state
from tests.compute.test_host_failure import instance_on, rp_of, two_hosts_and_a_controller
from tests.support import wait_for


def test_a_disabled_host_is_skipped_then_drained_then_enabled(
        start_compute, start_controller, compute_config, host_config, schedule_config, store,
        placement, run_schedule):
    a, b, computes = two_hosts_and_a_controller(start_compute, start_controller,
                                                compute_config, host_config, schedule_config,
                                                store)
    name = a["compute"]["name"]
    moving = instance_on(store, placement, a, on_host_failure="rebuild")
    staying = instance_on(store, placement, a, on_host_failure="error")

    disabled = run_schedule("host", "disable", name, "--reason", "new disks")
    assert disabled.code == 0, disabled.stderr
    assert disabled.stdout.strip() == f"HOST {name} ({rp_of(a)}) DISABLED"
    shown = run_schedule("host", "show", name).stdout
    assert "state      disabled" in shown and ": new disks" in shown, shown
    assert moving["uuid"] in shown and staying["uuid"] in shown

    # The scheduler skips it, and says so when it is the only fit.
    placed = run_schedule("resources=VCPU:1,MEMORY_MB:64,DISK_GB:1", "--json")
    assert placed.code == 0, placed.stderr
    assert [i["host"] for i in placed.json()["instances"]] == [rp_of(b)]
    only_a = run_schedule(f"resources=VCPU:1,MEMORY_MB:64,DISK_GB:1&in_tree={rp_of(a)}")
    assert only_a.code == 1
    assert "DisabledFilter removed 1 host(s)" in only_a.stdout
    assert f"[{name}]" in only_a.stdout

    # A restart of the host keeps it disabled: the maintenance key outlives the daemon.
    assert computes[rp_of(a)].terminate() == 0
    start_compute(a, name="host-a-restarted")
    wait_for(lambda: store.get(store.keys.alive(rp_of(a))), 30, what="host-a back")
    assert DISABLED_TRAIT in placement.get_traits(rp_of(a))

    drained = run_schedule("host", "drain", name, "--mode", "rebuild", timeout=90)
    assert drained.code == 0, drained.stderr
    assert drained.stdout.splitlines()[-1] == "DRAINED 1 moved, 0 error, 1 left, 0 gone", \
        drained.stdout
    assert record(store, moving["uuid"])["host"] == rp_of(b)
    wait_state(store, moving["uuid"], "ACTIVE")
    assert set(placement.get_allocations(moving["uuid"])["allocations"]) == {rp_of(b)}
    assert record(store, staying["uuid"])["host"] == rp_of(a)
    assert placement.get_usages(rp_of(a))["VCPU"] == 1
    assert overlaps([a, b]) == []

    enabled = run_schedule("host", "enable", name)
    assert enabled.code == 0, enabled.stderr
    assert DISABLED_TRAIT not in placement.get_traits(rp_of(a))
    assert store.get(store.keys.maintenance(rp_of(a))) is None
    assert "state      up" in run_schedule("host", "show", name).stdout


def test_an_unknown_host_is_named_in_one_line(run_schedule):
    run = run_schedule("host", "disable", "no-such-host")
    assert run.code != 0
    assert run.stderr.strip().splitlines() == [
        "schedule.py: error: no host 'no-such-host' (neither a provider uuid nor a provider name)"]

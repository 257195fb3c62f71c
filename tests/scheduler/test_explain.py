"""Each "no valid host" reason, from real Placement and etcd."""

from __future__ import annotations

import uuid as uuidlib

import pytest

from etcd_compute.config import deep_merge
from etcd_compute.errors import NoValidHost
from etcd_compute.scheduler import RequestSpec, Scheduler
from tests.scheduler.conftest import add_host


def reasons_for(config, store, placement, query, **spec):
    scheduler = Scheduler(config, store=store, placement=placement)
    with pytest.raises(NoValidHost) as caught:
        scheduler.select_destinations(RequestSpec.build(query, **spec))
    assert str(caught.value) == "NO ALLOCATIONS LEFT"
    return caught.value.reasons


def test_resource_class_short_everywhere_names_largest_free(schedule_config, store, placement):
    add_host(placement, store, "small", totals={"VCPU": 4, "MEMORY_MB": 2048, "DISK_GB": 20})
    add_host(placement, store, "smaller", totals={"VCPU": 4, "MEMORY_MB": 1024, "DISK_GB": 20})
    reasons = reasons_for(schedule_config, store, placement,
                          "resources=VCPU:1,MEMORY_MB:4096,VGPU:1")
    assert reasons == [
        "resources=MEMORY_MB:4096: no resource provider has 4096 MEMORY_MB free "
        "(largest free: 2048, on 2 provider(s) with some)",
        "resources=VGPU:1: no resource provider has any VGPU free (none has inventory of it, "
        "or all of it is used)",
    ]


def test_classes_fit_separately_but_not_together(schedule_config, store, placement):
    add_host(placement, store, "cpu-rich", totals={"VCPU": 8, "MEMORY_MB": 512})
    add_host(placement, store, "ram-rich", totals={"VCPU": 1, "MEMORY_MB": 8192})
    (reason,) = reasons_for(schedule_config, store, placement, "resources=VCPU:2,MEMORY_MB:1024")
    assert reason.startswith("no resource provider has MEMORY_MB:1024, VCPU:2 free together")


def test_trait_and_aggregate_that_exclude_every_provider(schedule_config, store, placement):
    zone = str(uuidlib.uuid4())
    placement.ensure_custom_traits({"CUSTOM_GPU"})
    add_host(placement, store, "slow-1", traits={"CUSTOM_SLOW"})
    add_host(placement, store, "slow-2", traits={"CUSTOM_SLOW"})
    # A host with the GPU trait but no room at all for the request.
    add_host(placement, store, "gpu-full", totals={"VCPU": 1}, traits={"CUSTOM_GPU"})
    reasons = reasons_for(schedule_config, store, placement,
                          "resources=VCPU:2&required=CUSTOM_GPU&required=!CUSTOM_SLOW"
                          "&required=in:CUSTOM_GPU,CUSTOM_TPU", zone=zone)
    assert reasons == [
        "required=CUSTOM_GPU: no provider with enough free resources has trait CUSTOM_GPU",
        "required=in:CUSTOM_GPU,CUSTOM_TPU: no provider with enough free resources has any of "
        "CUSTOM_GPU, CUSTOM_TPU",
        "required=!CUSTOM_SLOW: every provider with enough free resources has trait CUSTOM_SLOW",
        f"member_of={zone}: no provider with enough free resources is in aggregate {zone}",
    ]


def test_unknown_trait_and_tree(schedule_config, store, placement):
    add_host(placement, store, "plain")
    other = str(uuidlib.uuid4())
    reasons = reasons_for(schedule_config, store, placement,
                          f"resources=VCPU:1&required=CUSTOM_NEVER_CREATED&in_tree={other}")
    assert reasons == [
        "required=CUSTOM_NEVER_CREATED: no provider with enough free resources has trait "
        "CUSTOM_NEVER_CREATED",
        f"in_tree={other}: no provider with enough free resources is in the tree of {other}",
    ]


def test_constraints_that_only_exclude_together(schedule_config, store, placement):
    placement.ensure_custom_traits({"CUSTOM_A", "CUSTOM_B"})
    add_host(placement, store, "a", traits={"CUSTOM_A"})
    add_host(placement, store, "b", traits={"CUSTOM_B"})
    (reason,) = reasons_for(schedule_config, store, placement,
                            "resources=VCPU:1&required=CUSTOM_A&required=CUSTOM_B")
    assert reason.endswith("each constraint alone leaves a provider with enough free resources, "
                           "but together they exclude every one")


def test_filters_say_how_many_and_which_hosts_they_removed(schedule_config, store, placement):
    add_host(placement, store, "dead-1", alive=False)
    add_host(placement, store, "dead-2", alive=False)
    add_host(placement, store, "disabled", traits={"COMPUTE_STATUS_DISABLED"})
    busy = add_host(placement, store, "busy")
    store.client.put(store.keys.spec(busy, str(uuidlib.uuid4())), "{}")
    config = deep_merge(schedule_config, {"scheduler": {"max_instances_per_host": 1}})
    reasons = reasons_for(config, store, placement, "resources=VCPU:1")
    assert reasons == [
        "AliveFilter removed 2 host(s): no heartbeat in etcd (/alive/<rp> missing: "
        "compute.py not running?) [dead-1, dead-2]",
        "DisabledFilter removed 1 host(s): disabled (trait COMPUTE_STATUS_DISABLED: "
        "compute.py stopped or host disabled by an operator) [disabled]",
        "MaxInstancesPerHostFilter removed 1 host(s): already at "
        "scheduler.max_instances_per_host [busy]",
    ]


def test_cli_prints_original_line_first_then_reasons(schedule_config, store, placement,
                                                     run_schedule):
    add_host(placement, store, "tiny", totals={"VCPU": 1, "MEMORY_MB": 512, "DISK_GB": 1})
    run = run_schedule("resources=VCPU:1,MEMORY_MB:5,DISK_GB:1"
                       "&required=MISC_SHARES_VIA_AGGREGATE")
    assert run.code == 1, run.stderr
    assert run.stdout.splitlines() == [
        "NO ALLOCATIONS LEFT",
        "required=MISC_SHARES_VIA_AGGREGATE: no provider with enough free resources has trait "
        "MISC_SHARES_VIA_AGGREGATE",
    ]
    as_json = run_schedule("resources=VCPU:2,MEMORY_MB:5,DISK_GB:1", "--json")
    assert as_json.code == 1
    assert as_json.json()["reasons"][0].startswith("resources=VCPU:2: no resource provider "
                                                   "has 2 VCPU free (largest free: 1")

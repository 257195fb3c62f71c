"""scheduler/context.py: what filters and weighers see besides the host starts empty for each
request (a group's members of one plan never leak into the next) and dated when it is made."""

from __future__ import annotations

import time

from etcd_compute.scheduler.context import PlanContext


def test_a_context_starts_with_no_group_no_policy_and_the_default_limit():
    context = PlanContext()
    assert (context.policy, dict(context.group_hosts), context.max_instances_per_host) == (
        None, {}, 50)


def test_each_request_counts_its_group_members_apart():
    first, second = PlanContext(policy="anti-affinity"), PlanContext(policy="anti-affinity")
    first.group_hosts["host-a"] += 1
    assert second.group_hosts["host-a"] == 0


def test_now_is_when_the_context_was_made():
    before = time.time()
    context = PlanContext()
    assert before <= context.now <= time.time()
    assert PlanContext(now=5.0).now == 5.0

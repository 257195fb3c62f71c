"""Server groups in etcd: per project, counted against their quota (and again after),
members from the scheduler's group of the same name."""

from __future__ import annotations

import pytest

from etcd_compute.api.objects.server_groups import ServerGroups, TooManyGroups
from tests.unit.fakes import FakeStore


def test_groups_are_kept_per_project_and_deleted():
    groups = ServerGroups(FakeStore())
    one = groups.create("a", "p1", "u1", "affinity", {}, limit=10)
    two = groups.create("b", "p2", "u2", "anti-affinity", {"max_server_per_host": 3}, 10)
    assert [g.id for g in groups.list("p1")] == [one.id]
    assert [g.id for g in groups.list()] == [one.id, two.id]
    assert groups.get(two.id).max_per_host == 3 and groups.get(one.id).max_per_host is None
    assert groups.get("not-a-uuid") is None and groups.members(one) == []
    groups.delete(one)
    assert groups.get(one.id) is None


def test_a_project_at_its_limit_gets_no_more_groups():
    groups = ServerGroups(FakeStore())
    groups.create("a", "p1", "u1", "affinity", {}, limit=1)
    with pytest.raises(TooManyGroups, match="too many server groups"):
        groups.create("b", "p1", "u1", "affinity", {}, limit=1)
    assert len(groups.list("p1")) == 1
    groups.create("c", "p1", "u1", "affinity", {}, limit=-1)  # unlimited

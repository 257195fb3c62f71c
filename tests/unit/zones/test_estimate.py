"""The estimator: as many picks as fit, each with its host's raw weights; why no more."""

from __future__ import annotations

from etcd_compute.scheduler import RequestSpec
from etcd_compute.zones.estimate import estimate, reasons
from tests.unit.zones.world import QUERY, World


def test_as_many_as_fit_best_first_with_raw_weights():
    world = World()
    zone = world.zone("parent")
    zone.add_host("big", vcpu=4)
    zone.add_host("small", vcpu=2)
    with world.tree() as tree:
        found = estimate(tree.root.scheduler, RequestSpec.build(QUERY, count=10))
        assert found.fit == 6 and found.offered == 2
        # Free RAM and CPU (then build failures, group members) after each pick, never
        # rising: the picks deplete the hosts.
        assert found.raw[0] == (768, 3, 0, 0)
        assert [r[1] for r in found.raw] == sorted((r[1] for r in found.raw), reverse=True)
        assert found.report is not None and found.report.placed == 6
        assert found.report.count == 1  # the total is said once, across zones
        lines = reasons(tree.root.scheduler, RequestSpec.build(QUERY, count=10), found)
        assert lines == ["2 of 2 candidate host(s) would be full with the earlier instances "
                         "of this request"]
        assert world["parent"].placement.consumers == {}  # nothing claimed


def test_all_fit_has_no_reasons():
    world = World()
    world.zone("parent").add_host("h")
    with world.tree() as tree:
        found = estimate(tree.root.scheduler, RequestSpec.build(QUERY, count=2))
        assert (found.fit, found.report) == (2, None)
        assert reasons(tree.root.scheduler, RequestSpec.build(QUERY, count=2), found) == []


def test_nothing_offered_asks_placement_why():
    world = World()
    world.zone("parent")
    with world.tree() as tree:
        request = RequestSpec.build(QUERY)
        found = estimate(tree.root.scheduler, request)
        assert (found.fit, found.offered, found.report) == (0, 0, None)
        assert reasons(tree.root.scheduler, request, found)[0].startswith(
            "resources=DISK_GB:1: no resource provider has any DISK_GB free")


def test_group_members_are_counted_before_planning():
    world = World()
    zone = world.zone("parent")
    zone.add_host("h")
    with world.tree() as tree:
        tree.root.scheduler.select_destinations(
            RequestSpec.build(QUERY, count=2, group=("web", "affinity")))
        found = estimate(tree.root.scheduler,
                         RequestSpec.build(QUERY, group=("web", "affinity")))
        assert found.group_members == 2 and found.group_revision is not None

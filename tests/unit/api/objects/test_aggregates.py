"""Aggregates in etcd (ids counted up, names unique) and their hosts in Placement."""

from __future__ import annotations

import pytest

from etcd_compute.api.objects.aggregates import AggregateChanged, AggregateExists, Aggregates
from etcd_compute.errors import PlacementError
from tests.unit.fakes import FakePlacement, FakeStore


def test_ids_count_up_and_names_are_unique():
    aggregates = Aggregates(FakeStore(), FakePlacement())
    first = aggregates.create("a", None)
    assert (first.id, aggregates.create("b", "az").id) == (1, 2)
    with pytest.raises(AggregateExists):
        aggregates.create("a", None)
    assert aggregates.delete(first)
    assert aggregates.create("a", None).id == 3
    assert aggregates.zones() == {}  # a zone is its hosts'
    zoned = aggregates.get(2)
    zoned.hosts = ["hv1"]
    aggregates.save(zoned)
    assert aggregates.zones() == {"az": [zoned.uuid]}


def test_a_stale_copy_is_not_written():
    aggregates = Aggregates(FakeStore(), FakePlacement())
    made = aggregates.create("a", None)
    stale = aggregates.get(made.id)
    aggregates.save(made)
    with pytest.raises(AggregateChanged):
        aggregates.save(stale)
    assert not aggregates.delete(stale)


class FailingPlacement(FakePlacement):
    def change_aggregates(self, uuid, add=(), remove=()):
        raise PlacementError("placement is down")


def test_a_host_placement_refused_is_not_left_in_etcd():
    placement = FailingPlacement()
    placement.ensure_provider("rp", "hv1")
    aggregates = Aggregates(FakeStore(), placement)
    made = aggregates.create("a", None)
    with pytest.raises(PlacementError):
        aggregates.add_host(made, "hv1", "rp")
    assert aggregates.get(made.id).hosts == []

"""An aggregate as Nova shows it: no hosts and metadata in a create's answer; 2.41 uuid."""

from __future__ import annotations

from types import SimpleNamespace

from etcd_compute.api.microversion import Version
from etcd_compute.api.objects.aggregates import Aggregate
from etcd_compute.api.views import aggregates as view


def _req(version: str) -> SimpleNamespace:
    major, minor = version.split(".")
    return SimpleNamespace(version=Version(int(major), int(minor)))


def test_fields_per_microversion():
    found = Aggregate(7, "0b5d6c43-43f6-4c1e-9f8b-6c5a8a6f2a11", "a", "az", ["hv1"],
                      {"availability_zone": "az"}, created_at=0.0)
    shown = view.aggregate(_req("2.1"), found)
    assert shown == {"id": 7, "name": "a", "availability_zone": "az",
                     "created_at": "1970-01-01T00:00:00.000000", "updated_at": None,
                     "deleted_at": None, "deleted": False, "hosts": ["hv1"],
                     "metadata": {"availability_zone": "az"}}
    assert "hosts" not in view.aggregate(_req("2.1"), found, created=True)
    assert view.aggregate(_req("2.41"), found)["uuid"] == found.uuid

"""A migration as Nova shows it, per microversion."""

from __future__ import annotations

from types import SimpleNamespace

from etcd_compute.api.microversion import Version
from etcd_compute.api.objects.migrations import Migration
from etcd_compute.api.views import migrations as view


def _req(minor: int) -> SimpleNamespace:
    return SimpleNamespace(version=Version(2, minor))


def test_fields_per_microversion():
    found = Migration(5, "0b5d6c43-43f6-4c1e-9f8b-6c5a8a6f2a11", "i", "resize", "finished",
                      "hv1", "hv1", 0.0, None, "u1", "p1")
    shown = view.migration(_req(1), found)
    assert shown["source_node"] == "hv1" and shown["updated_at"] is None
    assert shown["old_instance_type_id"] is None and "migration_type" not in shown
    assert view.migration(_req(23), found)["migration_type"] == "resize"
    assert view.migration(_req(59), found)["uuid"] == found.uuid
    assert view.migration(_req(80), found)["project_id"] == "p1"

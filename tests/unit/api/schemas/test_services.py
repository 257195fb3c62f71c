"""os-services' schemas per microversion."""

from __future__ import annotations

from etcd_compute.api.microversion import Version
from etcd_compute.api.schemas import services


def test_service_updates_change_shape_at_2_53():
    assert services.update_schema(Version(2, 10))["required"] == ["host", "binary"]
    assert "forced_down" in services.update_schema(Version(2, 11))["properties"]
    assert "status" in services.update_schema(Version(2, 53))["properties"]
    assert not services.index_query_schema(Version(2, 75))["additionalProperties"]


"""The flavors schemas per microversion."""

from __future__ import annotations

from etcd_compute.api.microversion import Version
from etcd_compute.api.schemas import flavors


def test_description_from_2_55_and_strict_queries_from_2_75():
    create = flavors.create_schema(Version(2, 55))["properties"]["flavor"]["properties"]
    assert "description" in create
    assert "description" not in flavors.create_schema(Version(2, 54))["properties"][
        "flavor"]["properties"]
    assert flavors.index_query_schema(Version(2, 75))["additionalProperties"] is False

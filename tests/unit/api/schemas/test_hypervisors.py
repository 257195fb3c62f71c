"""os-hypervisors' query schemas per microversion."""

from __future__ import annotations

from etcd_compute.api.microversion import Version
from etcd_compute.api.schemas import hypervisors


def test_hypervisor_queries_per_microversion():
    assert "limit" not in hypervisors.index_query_schema(Version(2, 32))["properties"]
    assert "limit" in hypervisors.index_query_schema(Version(2, 33))["properties"]
    at_253 = hypervisors.index_query_schema(Version(2, 53))
    assert "with_servers" in at_253["properties"] and not at_253["additionalProperties"]
    assert "with_servers" in hypervisors.show_query_schema(Version(2, 53))["properties"]

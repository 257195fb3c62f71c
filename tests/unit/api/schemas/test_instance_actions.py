"""os-instance-actions' query schemas per microversion."""

from __future__ import annotations

from etcd_compute.api.microversion import Version
from etcd_compute.api.schemas import instance_actions


def test_queries_close_at_2_58_and_grow_at_2_66():
    assert instance_actions.index_query_schema(Version(2, 57))["additionalProperties"]
    at_258 = instance_actions.index_query_schema(Version(2, 58))
    assert not at_258["additionalProperties"] and "changes-before" not in at_258["properties"]
    assert "changes-before" in instance_actions.index_query_schema(Version(2, 66))[
        "properties"]

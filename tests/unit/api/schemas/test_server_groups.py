"""os-server-groups' schemas per microversion (Nova's steps)."""

from __future__ import annotations

from etcd_compute.api.microversion import Version
from etcd_compute.api.schemas import server_groups


def props(version: str) -> dict:
    return server_groups.create_schema(Version.parse(version))["properties"]["server_group"]


def test_create_grows_at_2_15_and_changes_at_2_64():
    assert props("2.14")["properties"]["policies"]["items"][0]["enum"] == server_groups.HARD
    assert "soft-affinity" in props("2.15")["properties"]["policies"]["items"][0]["enum"]
    at_264 = props("2.64")
    assert at_264["required"] == ["name", "policy"] and "rules" in at_264["properties"]
    assert "policies" not in at_264["properties"]


def test_list_queries_close_at_2_75():
    assert server_groups.index_query_schema(Version(2, 74))["additionalProperties"]
    assert not server_groups.index_query_schema(Version(2, 75))["additionalProperties"]

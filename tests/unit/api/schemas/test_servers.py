"""The servers schemas per microversion (Nova's steps)."""

from __future__ import annotations

from etcd_compute.api.microversion import Version
from etcd_compute.api.schemas import servers


def props(version: str) -> dict:
    return servers.create_schema(Version.parse(version))["properties"]["server"]["properties"]


def test_create_grows_and_sheds_fields_at_novas_steps():
    assert "description" not in props("2.18") and "description" in props("2.19")
    assert "networks" in servers.create_schema(Version(2, 37))["properties"]["server"][
        "required"]
    assert "tags" in props("2.52") and "personality" in props("2.56")
    assert "personality" not in props("2.57")
    assert "trusted_image_certificates" in props("2.63") and "host" in props("2.74")
    assert props("2.1")["user_data"]["maxLength"] == 65535


def test_list_queries_tighten_at_2_75():
    assert servers.index_query_schema(Version(2, 74))["additionalProperties"] is True
    assert servers.index_query_schema(Version(2, 75))["additionalProperties"] is False
    assert "changes-before" in servers.index_query_schema(Version(2, 66))["properties"]
    assert "tags" not in servers.index_query_schema(Version(2, 25))["properties"]

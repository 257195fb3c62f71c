"""The keypairs schemas per microversion."""

from __future__ import annotations

from etcd_compute.api.microversion import Version
from etcd_compute.api.schemas import keypairs


def test_type_from_2_2_user_from_2_10_import_only_from_2_92():
    def fields(version: str) -> dict:
        return keypairs.create_schema(Version.parse(version))["properties"]["keypair"]

    assert "type" not in fields("2.1")["properties"] and "type" in fields("2.2")["properties"]
    assert "user_id" in fields("2.10")["properties"]
    assert fields("2.92")["required"] == ["name", "public_key"]
    assert "limit" in keypairs.index_query_schema(Version(2, 35))["properties"]
    assert keypairs.query_schema(Version(2, 75))["additionalProperties"] is False

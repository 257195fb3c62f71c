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


def test_a_user_cannot_claim_to_see_another_projects_network():
    """`caller_sees` is the API's own word to the host (it saw the network with the caller's
    token): a create body that carries it is refused, at every microversion."""
    import jsonschema
    import pytest

    net = "3f1d2c4b-5a69-4e70-8b1c-2d3e4f5a6b7c"
    for version in ("2.1", "2.37", "2.90"):
        schema = servers.create_schema(Version.parse(version))
        body = {"server": {"name": "x", "imageRef": net, "flavorRef": "1",
                           "networks": [{"uuid": net}]}}
        jsonschema.validate(body, schema)  # the same body without it is fine
        body["server"]["networks"] = [{"uuid": net, "caller_sees": True}]
        with pytest.raises(jsonschema.ValidationError, match="caller_sees"):
            jsonschema.validate(body, schema)

"""os-interface bodies per microversion."""

from __future__ import annotations

from etcd_compute.api.microversion import Version
from etcd_compute.api.schemas import attach_interfaces as schema


def test_a_tag_is_taken_from_2_49() -> None:
    tag = "tag"
    assert tag not in schema.create_schema(Version(2, 48))["properties"][
        "interfaceAttachment"]["properties"]
    assert tag in schema.create_schema(Version(2, 49))["properties"][
        "interfaceAttachment"]["properties"]

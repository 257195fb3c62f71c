"""os-services' bodies and queries, per microversion (Nova's `schemas/services.py`)."""

from __future__ import annotations

from typing import Any

from etcd_compute.api.microversion import Version
from etcd_compute.api.schemas import parameter_types as types

_reason = {"type": "string", "minLength": 1, "maxLength": 255}
_binary = {"type": "string", "minLength": 1, "maxLength": 255}


def update_schema(version: Version) -> dict[str, Any]:
    """Before 2.53 the body names host and binary (2.11: forced_down); from 2.53 the path
    names the service and the body its status, reason or forced_down."""
    if version.at_least("2.53"):
        return {"type": "object",
                "properties": {"status": {"type": "string", "enum": ["enabled", "disabled"]},
                               "disabled_reason": _reason, "forced_down": types.boolean},
                "additionalProperties": False}
    properties: dict[str, Any] = {"host": types.fqdn, "binary": _binary,
                                  "disabled_reason": _reason}
    if version.at_least("2.11"):
        properties["forced_down"] = types.boolean
    return {"type": "object", "properties": properties, "required": ["host", "binary"],
            "additionalProperties": False}


def index_query_schema(version: Version) -> dict[str, Any]:
    return {"type": "object",
            "properties": {"host": types.common_query_param,
                           "binary": types.common_query_param},
            "additionalProperties": not version.at_least("2.75")}

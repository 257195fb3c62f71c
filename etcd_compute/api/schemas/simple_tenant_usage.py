"""os-simple-tenant-usage's query strings (Nova's `schemas/simple_tenant_usage.py`)."""

from __future__ import annotations

from typing import Any

from etcd_compute.api.microversion import Version
from etcd_compute.api.schemas import parameter_types as types

_common = {"start": types.multi_params({"type": "string"}),
           "end": types.multi_params({"type": "string"})}


def query_schema(version: Version, index: bool) -> dict[str, Any]:
    """index takes `detailed`; from 2.40 both take limit and marker; from 2.75 nothing
    else."""
    properties: dict[str, Any] = dict(_common)
    if index:
        properties["detailed"] = types.multi_params({"type": "string"})
    if version.at_least("2.40"):
        properties.update(types.pagination_parameters)
    return {"type": "object", "properties": properties,
            "additionalProperties": not version.at_least("2.75")}

"""os-hypervisors' queries, per microversion (Nova's `schemas/hypervisors.py`)."""

from __future__ import annotations

from typing import Any

from etcd_compute.api.microversion import Version
from etcd_compute.api.schemas import parameter_types as types


def index_query_schema(version: Version) -> dict[str, Any]:
    """2.33: limit and marker; 2.53: a hostname pattern and with_servers, nothing else."""
    if version.at_least("2.53"):
        return {"type": "object",
                "properties": {
                    "limit": types.single_param(types.non_negative_integer),
                    "marker": types.single_param({"type": "string"}),
                    "hypervisor_hostname_pattern": types.single_param(types.fqdn),
                    "with_servers": types.single_param(types.boolean)},
                "additionalProperties": False}
    if version.at_least("2.33"):
        return {"type": "object", "properties": dict(types.pagination_parameters),
                "additionalProperties": True}
    return {"type": "object", "properties": {}, "additionalProperties": True}


def show_query_schema(version: Version) -> dict[str, Any]:
    if version.at_least("2.53"):
        return {"type": "object",
                "properties": {"with_servers": types.single_param(types.boolean)},
                "additionalProperties": False}
    return {"type": "object", "properties": {}, "additionalProperties": True}

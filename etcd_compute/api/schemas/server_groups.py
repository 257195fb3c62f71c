"""os-server-groups' bodies and queries, per microversion (Nova's
`schemas/server_groups.py`)."""

from __future__ import annotations

import copy
from typing import Any

from etcd_compute.api.microversion import Version
from etcd_compute.api.schemas import parameter_types as types

HARD = ["anti-affinity", "affinity"]
SOFT = ["soft-anti-affinity", "soft-affinity"]

_create = {
    "type": "object",
    "properties": {"server_group": {
        "type": "object",
        "properties": {
            "name": types.name,
            # One policy, as a list of one until 2.64.
            "policies": {"type": "array", "items": [{"type": "string", "enum": HARD}],
                         "uniqueItems": True, "minItems": 1, "maxItems": 1,
                         "additionalItems": False},
        },
        "required": ["name", "policies"],
        "additionalProperties": False,
    }},
    "required": ["server_group"],
    "additionalProperties": False,
}


def create_schema(version: Version) -> dict[str, Any]:
    """2.15: the soft policies; 2.64: `policy` (one string) and `rules`."""
    schema = copy.deepcopy(_create)
    group = schema["properties"]["server_group"]
    if version.at_least("2.15"):
        group["properties"]["policies"]["items"][0]["enum"] = HARD + SOFT
    if version.at_least("2.64"):
        del group["properties"]["policies"]
        group["required"] = ["name", "policy"]
        group["properties"]["policy"] = {"type": "string", "enum": HARD + SOFT}
        group["properties"]["rules"] = {
            "type": "object",
            "properties": {"max_server_per_host": types.positive_integer},
            "additionalProperties": False}
    return schema


def index_query_schema(version: Version) -> dict[str, Any]:
    """all_projects, limit, offset; from 2.75 nothing else."""
    return {"type": "object",
            "properties": {"all_projects": types.multi_params({"type": "string"}),
                           "limit": types.multi_params(types.non_negative_integer),
                           "offset": types.multi_params(types.non_negative_integer)},
            "additionalProperties": not version.at_least("2.75")}

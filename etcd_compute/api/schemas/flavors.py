"""Flavors and their extra specs, per microversion (Nova's `schemas/flavors.py`,
`flavors_extraspecs.py`)."""

from __future__ import annotations

import copy
from typing import Any

from etcd_compute.api.microversion import Version
from etcd_compute.api.schemas import parameter_types as types

SORT_KEYS = ["created_at", "description", "disabled", "ephemeral_gb", "flavorid", "id",
             "is_public", "memory_mb", "name", "root_gb", "rxtx_factor", "swap",
             "updated_at", "vcpu_weight", "vcpus"]

create = {
    "type": "object",
    "properties": {
        "flavor": {
            "type": "object",
            "properties": {
                "name": types.name,
                "id": {"type": ["string", "number", "null"], "minLength": 1, "maxLength": 255,
                       "pattern": "^(?! )[a-zA-Z0-9. _-]+(?<! )$"},
                "ram": types.flavor_param_positive,
                "vcpus": types.flavor_param_positive,
                "disk": types.flavor_param_non_negative,
                "OS-FLV-EXT-DATA:ephemeral": types.flavor_param_non_negative,
                "swap": types.flavor_param_non_negative,
                "rxtx_factor": {"type": ["number", "string"], "pattern": r"^[0-9]+(\.[0-9]+)?$",
                                "exclusiveMinimum": 0, "maximum": 3.40282e+38},
                "os-flavor-access:is_public": types.boolean,
            },
            "required": ["name", "ram", "vcpus", "disk"],
            "additionalProperties": False,
        },
    },
    "required": ["flavor"],
    "additionalProperties": False,
}

_description = {"type": ["string", "null"], "minLength": 0, "maxLength": 65535,
                "format": "printable"}

_create_v255 = copy.deepcopy(create)
_create_v255["properties"]["flavor"]["properties"]["description"] = _description

update = {
    "type": "object",
    "properties": {
        "flavor": {"type": "object", "properties": {"description": _description},
                   "required": ["description"], "additionalProperties": False},
    },
    "required": ["flavor"],
    "additionalProperties": False,
}

index_query = {
    "type": "object",
    "properties": {
        **types.pagination_parameters,
        "is_public": types.multi_params({"type": "string"}),
        "minRam": types.multi_params({"type": "string"}),
        "minDisk": types.multi_params({"type": "string"}),
        "sort_key": types.multi_params({"type": "string", "enum": SORT_KEYS}),
        "sort_dir": types.multi_params({"type": "string", "enum": ["asc", "desc"]}),
    },
    "additionalProperties": True,
}
_index_v275 = {**index_query, "additionalProperties": False}

# Extra specs: keys and values as Nova's `flavors_extraspecs.py` (before 2.86's validation
# of known keys).
_extra_spec_key = {"type": "string", "pattern": "^[a-zA-Z0-9-_:. ]{1,255}$"}
_extra_spec_value = {"type": ["string", "number", "boolean"], "minLength": 1,
                     "maxLength": 255}
extra_specs_create = {
    "type": "object",
    "properties": {
        "extra_specs": {
            "type": "object",
            "patternProperties": {"^[a-zA-Z0-9-_:. ]{1,255}$": _extra_spec_value},
            "additionalProperties": False,
        },
    },
    "required": ["extra_specs"],
    "additionalProperties": False,
}
extra_spec_update = {
    "type": "object",
    "patternProperties": {"^[a-zA-Z0-9-_:. ]{1,255}$": _extra_spec_value},
    "minProperties": 1,
    "maxProperties": 1,
    "additionalProperties": False,
}


def create_schema(version: Version) -> dict[str, Any]:
    return _create_v255 if version.at_least("2.55") else create


def index_query_schema(version: Version) -> dict[str, Any]:
    return _index_v275 if version.at_least("2.75") else index_query

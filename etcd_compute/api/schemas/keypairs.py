"""Keypairs, per microversion (Nova's `schemas/keypairs.py`)."""

from __future__ import annotations

import copy
from typing import Any

from etcd_compute.api.microversion import Version
from etcd_compute.api.schemas import parameter_types as types

create = {
    "type": "object",
    "properties": {
        "keypair": {
            "type": "object",
            "properties": {"name": types.keypair_name_special_chars,
                           "public_key": {"type": "string"}},
            "required": ["name"],
            "additionalProperties": False,
        },
    },
    "required": ["keypair"],
    "additionalProperties": False,
}

_create_v22 = copy.deepcopy(create)
_create_v22["properties"]["keypair"]["properties"]["type"] = {"type": "string",
                                                              "enum": ["ssh", "x509"]}
_create_v210 = copy.deepcopy(_create_v22)
_create_v210["properties"]["keypair"]["properties"]["user_id"] = {"type": "string"}
_create_v292 = copy.deepcopy(_create_v210)
_create_v292["properties"]["keypair"]["properties"]["name"] = \
    types.keypair_name_special_chars_v292
_create_v292["properties"]["keypair"]["required"] = ["name", "public_key"]

_query_v20: dict[str, Any] = {"type": "object", "properties": {}, "additionalProperties": True}
_query_v210 = {"type": "object",
               "properties": {"user_id": types.multi_params({"type": "string"})},
               "additionalProperties": True}
_index_v235 = copy.deepcopy(_query_v210)
_index_v235["properties"].update(types.pagination_parameters)
_index_v275 = {**_index_v235, "additionalProperties": False}
_query_v275 = {**_query_v210, "additionalProperties": False}


def create_schema(version: Version) -> dict[str, Any]:
    for since, schema in (("2.92", _create_v292), ("2.10", _create_v210), ("2.2", _create_v22)):
        if version.at_least(since):
            return schema
    return create


def index_query_schema(version: Version) -> dict[str, Any]:
    for since, schema in (("2.75", _index_v275), ("2.35", _index_v235),
                          ("2.10", _query_v210)):
        if version.at_least(since):
            return schema
    return _query_v20


def query_schema(version: Version) -> dict[str, Any]:
    """show and delete."""
    for since, schema in (("2.75", _query_v275), ("2.10", _query_v210)):
        if version.at_least(since):
            return schema
    return _query_v20

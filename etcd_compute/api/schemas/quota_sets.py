"""Quota sets and limits, per microversion (Nova's `schemas/quota_sets.py`, `limits.py`)."""

from __future__ import annotations

import copy
import functools
from typing import Any

from etcd_compute.api.microversion import Version
from etcd_compute.api.schemas import parameter_types as types

_quota = {"type": ["integer", "string"], "pattern": "^-?[0-9]+$", "minimum": -1,
          "maximum": 0x7FFFFFFF}
# Every quota Nova's API names at 2.1 (network ones until 2.36, file injection until 2.57).
NETWORK_QUOTAS = ("floating_ips", "fixed_ips", "security_groups", "security_group_rules")
INJECTION_QUOTAS = ("injected_files", "injected_file_content_bytes",
                    "injected_file_path_bytes")
# nova-network's quota, taken by Nova's updates until 2.36 (quota classes: 2.50) and never
# shown: Nova has no such quota any more.
NETWORKS = "networks"
OURS = ("instances", "cores", "ram", "metadata_items", "key_pairs", "server_groups",
        "server_group_members")


@functools.cache
def quotas_at(version: Version) -> tuple[str, ...]:
    """The quota names a quota set has at `version`."""
    names = OURS
    if not version.at_least("2.57"):
        names += INJECTION_QUOTAS
    if not version.at_least("2.36"):
        names += NETWORK_QUOTAS
    return names


@functools.cache
def update_schema(version: Version) -> dict[str, Any]:
    """Nova's `update`, `update_v236`, `update_v257`: the names shown, and `networks` (taken,
    not kept) until 2.36."""
    properties: dict[str, Any] = {name: _quota for name in quotas_at(version)}
    if not version.at_least("2.36"):
        properties[NETWORKS] = _quota
    properties["force"] = types.boolean
    return {
        "type": "object",
        "properties": {"quota_set": {"type": "object", "properties": properties,
                                     "additionalProperties": False}},
        "required": ["quota_set"],
        "additionalProperties": False,
    }


show_query = {"type": "object",
              "properties": {"user_id": types.multi_params({"type": "string"})},
              "additionalProperties": True}
_show_query_v275 = {**copy.deepcopy(show_query), "additionalProperties": False}

limits_query = {"type": "object",
                "properties": {"tenant_id": types.multi_params({"type": "string"})},
                "additionalProperties": True}
_limits_query_v275 = {**copy.deepcopy(limits_query), "additionalProperties": False}


def show_query_schema(version: Version) -> dict[str, Any]:
    return _show_query_v275 if version.at_least("2.75") else show_query


def limits_query_schema(version: Version) -> dict[str, Any]:
    return _limits_query_v275 if version.at_least("2.75") else limits_query

"""os-quota-class-sets' bodies per microversion (Nova's `schemas/quota_classes.py`): the
server group quotas from 2.50, the network ones until 2.50, file injection until 2.57."""

from __future__ import annotations

import functools
from typing import Any

from etcd_compute.api.microversion import Version
from etcd_compute.api.schemas.quota_sets import INJECTION_QUOTAS, NETWORK_QUOTAS, _quota

BASE = ("instances", "cores", "ram", "metadata_items", "key_pairs")
SERVER_GROUP_QUOTAS = ("server_groups", "server_group_members")


@functools.cache
def quotas_at(version: Version) -> tuple[str, ...]:
    names = BASE
    if version.at_least("2.50"):
        names += SERVER_GROUP_QUOTAS
    else:
        names += NETWORK_QUOTAS
    if not version.at_least("2.57"):
        names += INJECTION_QUOTAS
    return names


@functools.cache
def update_schema(version: Version) -> dict[str, Any]:
    return {
        "type": "object",
        "properties": {"quota_class_set": {
            "type": "object", "properties": {name: _quota for name in quotas_at(version)},
            "additionalProperties": False}},
        "required": ["quota_class_set"],
        "additionalProperties": False,
    }

"""os-quota-class-sets' bodies per microversion (Nova's `schemas/quota_classes.py`): shown,
the server group quotas from 2.50, the network ones until 2.50, file injection until 2.57;
taken by an update, as Nova's `update` (2.1-2.49: all of its quotas, the server groups'
and nova-network's `networks` too), `update_v250` and `update_v257`."""

from __future__ import annotations

import functools
from typing import Any

from etcd_compute.api.microversion import Version
from etcd_compute.api.schemas.quota_sets import (
    INJECTION_QUOTAS,
    NETWORK_QUOTAS,
    NETWORKS,
    _quota,
)

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
def update_names(version: Version) -> tuple[str, ...]:
    """The names an update takes at `version`: what it shows, and before 2.50 the server
    group quotas (shown from 2.50) and `networks` (no such quota is kept: nova-network's)."""
    names = quotas_at(version)
    if not version.at_least("2.50"):
        names += SERVER_GROUP_QUOTAS + (NETWORKS,)
    return names


@functools.cache
def update_schema(version: Version) -> dict[str, Any]:
    return {
        "type": "object",
        "properties": {"quota_class_set": {
            "type": "object", "properties": {name: _quota for name in update_names(version)},
            "additionalProperties": False}},
        "required": ["quota_class_set"],
        "additionalProperties": False,
    }

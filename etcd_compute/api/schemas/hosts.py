"""os-hosts' bodies and queries (Nova's `schemas/hosts.py`)."""

from __future__ import annotations

from etcd_compute.api.schemas import parameter_types as types

_mode = {"type": "string", "enum": ["enable", "disable"]}

update = {
    "type": "object",
    "properties": {"status": _mode, "maintenance_mode": _mode},
    "anyOf": [{"required": ["status"]}, {"required": ["maintenance_mode"]}],
    "additionalProperties": False,
}

index_query = {"type": "object", "properties": {"zone": types.common_query_param},
               "additionalProperties": True}

"""Bodies of os-resetState, lock, createBackup and migrate (Nova's
`schemas/reset_server_state.py`, `lock_server.py`, `create_backup.py`,
`migrate_server.py`)."""

from __future__ import annotations

from typing import Any

from etcd_compute.api.microversion import Version
from etcd_compute.api.schemas import parameter_types as types

reset_state = {
    "type": "object",
    "properties": {"os-resetState": {
        "type": "object",
        "properties": {"state": {"type": "string", "enum": ["active", "error"]}},
        "required": ["state"],
        "additionalProperties": False,
    }},
    "required": ["os-resetState"],
    "additionalProperties": False,
}

# From 2.73 a lock may say why; before, Nova does not look at the body's value.
lock_v2_73 = {
    "type": "object",
    "properties": {"lock": {"oneOf": [
        {"type": "object",
         "properties": {"locked_reason": {"type": "string", "minLength": 1,
                                          "maxLength": 255}},
         "additionalProperties": False},
        {"type": "null"}]}},
    "required": ["lock"],
    "additionalProperties": False,
}

create_backup = {
    "type": "object",
    "properties": {"createBackup": {
        "type": "object",
        "properties": {"name": types.name, "backup_type": {"type": "string"},
                       "rotation": types.non_negative_integer,
                       "metadata": types.metadata},
        "required": ["name", "backup_type", "rotation"],
        "additionalProperties": False,
    }},
    "required": ["createBackup"],
    "additionalProperties": False,
}


def migrate_schema(version: Version) -> dict[str, Any]:
    """`migrate`: any value until 2.56, which takes an optional host."""
    if not version.at_least("2.56"):
        return {"type": "object", "properties": {"migrate": {}}, "required": ["migrate"],
                "additionalProperties": False}
    return {"type": "object",
            "properties": {"migrate": {"type": ["object", "null"],
                                       "properties": {"host": {**types.fqdn,
                                                               "type": ["string", "null"]}},
                                       "additionalProperties": False}},
            "required": ["migrate"], "additionalProperties": False}

"""Bodies of os-resetState, lock and createBackup (Nova's `schemas/reset_server_state.py`,
`lock_server.py`, `create_backup.py`)."""

from __future__ import annotations

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


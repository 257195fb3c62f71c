"""os-aggregates' bodies (Nova's `schemas/aggregates.py`)."""

from __future__ import annotations

import copy
from typing import Any

from etcd_compute.api.schemas import parameter_types as types

# Nova's az_name: a name (printable, no leading or trailing space) without ':' (the
# separator of `zone:host` at a server's create).
az_name = {**types.name, "pattern": "^[^:]*$"}
_zone = {"oneOf": [az_name, {"type": "null"}]}

create: dict[str, Any] = {
    "type": "object",
    "properties": {"aggregate": {
        "type": "object",
        "properties": {"name": types.name, "availability_zone": _zone},
        "required": ["name"], "additionalProperties": False}},
    "required": ["aggregate"], "additionalProperties": False}

update: dict[str, Any] = {
    "type": "object",
    "properties": {"aggregate": {
        "type": "object",
        "properties": {"name": types.name_with_leading_trailing_spaces,
                       "availability_zone": _zone},
        "additionalProperties": False,
        "anyOf": [{"required": ["name"]}, {"required": ["availability_zone"]}]}},
    "required": ["aggregate"], "additionalProperties": False}


def _host_action(name: str) -> dict[str, Any]:
    return {"type": "object",
            "properties": {name: {"type": "object", "properties": {"host": types.fqdn},
                                  "required": ["host"], "additionalProperties": False}},
            "required": [name], "additionalProperties": False}


add_host = _host_action("add_host")
remove_host = _host_action("remove_host")

_metadata_with_null = copy.deepcopy(types.metadata)
_metadata_with_null["patternProperties"]["^[a-zA-Z0-9-_:. ]{1,255}$"]["type"] = [
    "string", "null"]
set_metadata: dict[str, Any] = {
    "type": "object",
    "properties": {"set_metadata": {
        "type": "object", "properties": {"metadata": _metadata_with_null},
        "required": ["metadata"], "additionalProperties": False}},
    "required": ["set_metadata"], "additionalProperties": False}

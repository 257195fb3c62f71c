"""os-interface bodies (Nova's `schemas/attach_interfaces.py`): a network or a port, one
fixed IP at most; a device tag from 2.49."""

from __future__ import annotations

import copy
from typing import Any

from etcd_compute.api.microversion import Version
from etcd_compute.api.schemas import parameter_types as types

_uuid = {"type": "string", "format": "uuid"}

create = {
    "type": "object",
    "properties": {
        "interfaceAttachment": {
            "type": "object",
            "properties": {
                "net_id": _uuid,
                "port_id": _uuid,
                "fixed_ips": {
                    "type": "array", "minItems": 1, "maxItems": 1,
                    "items": {"type": "object",
                              "properties": {"ip_address": types.ip_address},
                              "required": ["ip_address"], "additionalProperties": False},
                },
            },
            "additionalProperties": False,
        },
    },
    "additionalProperties": False,
}

_create_v249 = copy.deepcopy(create)
_create_v249["properties"]["interfaceAttachment"]["properties"]["tag"] = types.tag


def create_schema(version: Version) -> dict[str, Any]:
    return _create_v249 if version.at_least("2.49") else create

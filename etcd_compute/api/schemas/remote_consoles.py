"""Remote consoles' bodies (Nova's `schemas/remote_consoles.py`): the old actions
(2.1-2.5) and `POST /servers/{id}/remote-consoles` (2.6+; `mks`/`webmks` from 2.8,
`spice-direct` from 2.99, beyond our maximum). Nova's enums keep the console types it no
longer serves (xvpvnc, rdp): they are refused further down, with Nova's errors."""

from __future__ import annotations

import copy
from typing import Any

from etcd_compute.api.microversion import Version


def _action(name: str, types: list[str]) -> dict[str, Any]:
    return {
        "type": "object",
        "properties": {name: {
            "type": "object",
            "properties": {"type": {"type": "string", "enum": types}},
            "required": ["type"],
            "additionalProperties": False,
        }},
        "required": [name],
        "additionalProperties": False,
    }


get_vnc_console = _action("os-getVNCConsole", ["novnc", "xvpvnc"])
get_spice_console = _action("os-getSPICEConsole", ["spice-html5"])
get_serial_console = _action("os-getSerialConsole", ["serial"])
# Nova's is empty: the action is gone (Hyper-V's), every body answers the same 400.
get_rdp_console: dict[str, Any] = {}

create_v26: dict[str, Any] = {
    "type": "object",
    "properties": {"remote_console": {
        "type": "object",
        "properties": {
            "protocol": {"type": "string", "enum": ["vnc", "spice", "serial", "rdp"]},
            "type": {"type": "string",
                     "enum": ["novnc", "xvpvnc", "spice-html5", "serial", "rdp-html5"]},
        },
        "required": ["protocol", "type"],
        "additionalProperties": False,
    }},
    "required": ["remote_console"],
    "additionalProperties": False,
}

create_v28 = copy.deepcopy(create_v26)
create_v28["properties"]["remote_console"]["properties"]["protocol"]["enum"].append("mks")
create_v28["properties"]["remote_console"]["properties"]["type"]["enum"].append("webmks")


def create_schema(version: Version) -> dict[str, Any]:
    return create_v28 if version.at_least("2.8") else create_v26

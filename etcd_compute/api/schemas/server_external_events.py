"""os-server-external-events' body per microversion (Nova's
`schemas/server_external_events.py`)."""

from __future__ import annotations

import functools
from typing import Any

from etcd_compute.api.microversion import Version

NAMES = ("network-changed", "network-vif-plugged", "network-vif-unplugged",
         "network-vif-deleted")
STATUSES = ("failed", "completed", "in-progress")


@functools.cache
def create_schema(version: Version) -> dict[str, Any]:
    names = list(NAMES)
    if version.at_least("2.51"):
        names.append("volume-extended")
    if version.at_least("2.76"):
        names.append("power-update")
    if version.at_least("2.82"):
        names.append("accelerator-request-bound")
    event = {"type": "object",
             "properties": {"server_uuid": {"type": "string", "format": "uuid"},
                            "name": {"type": "string", "enum": names},
                            "status": {"type": "string", "enum": list(STATUSES)},
                            # Nova's takes any string; printable here: it
                            # is handed to the host as it came (etcd's schema).
                            "tag": {"type": "string", "maxLength": 255,
                                    "format": "printable"}},
             "required": ["server_uuid", "name"], "additionalProperties": False}
    return {"type": "object",
            "properties": {"events": {"type": "array", "minItems": 1, "items": event}},
            "required": ["events"], "additionalProperties": False}

"""os-instance-actions' query strings, per microversion (Nova's
`schemas/instance_actions.py`)."""

from __future__ import annotations

from typing import Any

from etcd_compute.api.microversion import Version
from etcd_compute.api.schemas import parameter_types as types

_DATE = types.single_param({"type": "string", "format": "date-time"})


def index_query_schema(version: Version) -> dict[str, Any]:
    """2.58: limit, marker and changes-since (nothing else); 2.66: changes-before."""
    if not version.at_least("2.58"):
        return {"type": "object", "properties": {}, "additionalProperties": True}
    properties = {"limit": types.single_param(types.non_negative_integer),
                  "marker": types.single_param({"type": "string"}),
                  "changes-since": _DATE}
    if version.at_least("2.66"):
        properties["changes-before"] = _DATE
    return {"type": "object", "properties": properties, "additionalProperties": False}

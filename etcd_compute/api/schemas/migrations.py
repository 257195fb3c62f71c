"""os-migrations' query strings per microversion (Nova's `schemas/migrations.py`)."""

from __future__ import annotations

import functools
from typing import Any

from etcd_compute.api.microversion import Version
from etcd_compute.api.schemas import parameter_types as types


@functools.cache
def list_query_schema(version: Version) -> dict[str, Any]:
    properties: dict[str, Any] = {name: types.common_query_param for name in (
        "hidden", "host", "instance_uuid", "source_compute", "status", "migration_type")}
    closed = False
    if version.at_least("2.59"):
        properties["changes-since"] = types.multi_params({"type": "string",
                                                          "format": "date-time"})
        properties.update(types.pagination_parameters)
        closed = True
    if version.at_least("2.66"):
        properties["changes-before"] = types.multi_params({"type": "string",
                                                           "format": "date-time"})
    if version.at_least("2.80"):
        properties["user_id"] = types.common_query_param
        properties["project_id"] = types.common_query_param
    return {"type": "object", "properties": properties, "additionalProperties": not closed}

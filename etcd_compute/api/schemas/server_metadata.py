"""Server metadata bodies (Nova's `schemas/server_metadata.py`)."""

from __future__ import annotations

from etcd_compute.api.schemas import parameter_types as types

create = {"type": "object", "properties": {"metadata": types.metadata},
          "required": ["metadata"], "additionalProperties": False}
update_all = create
update = {"type": "object",
          "properties": {"meta": {**types.metadata, "minProperties": 1, "maxProperties": 1}},
          "required": ["meta"], "additionalProperties": False}

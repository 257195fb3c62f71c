"""Encode and decode the JSON messages we keep in etcd, validated both ways.

Like Placement validating every request body, nothing goes onto etcd or is
acted upon from it without matching its schema in `etcd_compute/schemas/`.
"""

from __future__ import annotations

import json
from typing import Any

import jsonschema

from etcd_compute.errors import InvalidMessage
from etcd_compute.schemas import is_valid, validator

INSTANCE_SPEC = "instance_spec"
INSTANCE_RECORD = "instance_record"
INSTANCE_LOCATION = "instance_location"
ALIVE = "alive"
HOST_STATS = "host_stats"
GROUP_MEMBER = "group_member"
CONSOLE = "console"
CONTROLLER_LEADER = "controller_leader"


def check(schema: str, message: Any) -> None:
    """Raise InvalidMessage with a one-line reason if `message` breaks `schema`."""
    if is_valid(schema, message):
        return
    error = jsonschema.exceptions.best_match(validator(schema).iter_errors(message))
    if error is not None:
        where = ".".join(str(p) for p in error.absolute_path)
        detail = error.message if len(error.message) < 200 else error.message[:197] + "..."
        raise InvalidMessage(f"{schema}: {where + ': ' if where else ''}{detail}")


def encode(schema: str, message: dict[str, Any]) -> str:
    check(schema, message)
    return json.dumps(message, sort_keys=True, separators=(",", ":"))


def decode(schema: str, raw: bytes | str) -> dict[str, Any]:
    try:
        message = json.loads(raw)
    except (ValueError, UnicodeDecodeError) as exc:
        raise InvalidMessage(f"{schema}: not valid JSON ({exc.__class__.__name__})") from None
    check(schema, message)
    return message

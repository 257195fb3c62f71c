"""Encode and decode the JSON messages we keep in etcd, validated both ways.

Like Placement validating every request body, nothing goes onto etcd or is
acted upon from it without matching its schema in `etcd_compute/schemas/`.

Whatever is stored under a key, reading it raises nothing but InvalidMessage:
a value larger than MAX_MESSAGE_BYTES or nested deeper than MAX_DEPTH is
refused before json.loads sees it (deep nesting once raised RecursionError out
of here and took the compute down), and the compiled validator's verdict is
final (jsonschema is asked only to explain a refusal).
"""

from __future__ import annotations

import json
import re
from typing import Any

from etcd_compute.errors import InvalidMessage
from etcd_compute.schemas import is_valid, validator

INSTANCE_SPEC = "instance_spec"
INSTANCE_RECORD = "instance_record"
INSTANCE_LOCATION = "instance_location"
ALIVE = "alive"
HOST_STATS = "host_stats"
GROUP_MEMBER = "group_member"
CONSOLE = "console"
CONSOLE_TOKEN = "console_token"
CONTROLLER_LEADER = "controller_leader"
HOST_MAINTENANCE = "host_maintenance"
INSTANCE_EVENTS = "instance_events"
SCHEDULE_REQUEST = "schedule_request"
SCHEDULE_ANSWER = "schedule_answer"
QUEUE_OPEN = "queue_open"
ZONE = "zone"
ZONE_INSTANCE = "zone_instance"
ZONE_INTENT = "zone_intent"
MIGRATION = "migration"
EXTERNAL_EVENTS = "external_events"
SERVER_PASSWORD = "server_password"
# The compute API's (etcd_compute/api/).
SERVER = "server"
FLAVOR = "flavor"
FLAVOR_NAME = "flavor_name"
KEYPAIR = "keypair"
QUOTA_SET = "quota_set"
QUOTA_CLASS = "quota_class"
QUOTA_RESERVATION = "quota_reservation"
SERVER_GROUP = "server_group"
AGGREGATE = "aggregate"
AGGREGATE_NAME = "aggregate_name"
AGGREGATE_LAST_ID = "aggregate_last_id"

# The largest message we write is a spec (64 KiB user-data, 16 KiB key, escaped
# as JSON at most 6 bytes a character) or a console (64 KiB); etcd takes 1.5 MiB.
MAX_MESSAGE_BYTES = 1024 * 1024
# Our deepest message nests 6 levels (a spec's alternates' allocations' resources).
MAX_DEPTH = 16
# Linear-time scans (no backtracking): escapes out first, then strings, then count.
_ESCAPES = re.compile(rb"\\.", re.S)
_STRINGS = re.compile(rb'"[^"]*"')
_BRACKETS = re.compile(rb"[\[\]{}]")


def check(schema: str, message: Any) -> None:
    """Raise InvalidMessage with a one-line reason if `message` breaks `schema`."""
    if is_valid(schema, message):
        return
    import jsonschema  # only to explain a refusal

    error = jsonschema.exceptions.best_match(validator(schema).iter_errors(message))
    if error is None:  # the explainer saw no fault; the verdict stands
        raise InvalidMessage(f"{schema}: does not match the schema")
    where = ".".join(_printable(str(p)) for p in error.absolute_path)
    detail = _printable(error.message)
    detail = detail if len(detail) < 200 else detail[:197] + "..."
    raise InvalidMessage(f"{schema}: {where + ': ' if where else ''}{detail}")


def _printable(text: str) -> str:
    """`text` with control characters escaped (a message must stay one line)."""
    return "".join(ch if ch.isprintable() else repr(ch)[1:-1] for ch in text)


def encode(schema: str, message: dict[str, Any]) -> str:
    check(schema, message)
    return json.dumps(message, sort_keys=True, separators=(",", ":"))


def nesting_depth(raw: bytes) -> int:
    """How deeply arrays and objects nest in the JSON text `raw` (strings skipped)."""
    depth = deepest = 0
    for bracket in _BRACKETS.findall(_STRINGS.sub(b"", _ESCAPES.sub(b"", raw))):
        depth += 1 if bracket in b"[{" else -1
        deepest = max(deepest, depth)
    return deepest


def decode(schema: str, raw: bytes | str) -> dict[str, Any]:
    message = parse(raw, schema)
    check(schema, message)
    return message


def parse(raw: bytes | str, what: str = "message") -> Any:
    """The JSON text of an etcd value, not checked against a schema (a glance at a field,
    where `decode` follows): the same guards first, InvalidMessage for anything wrong."""
    data = raw.encode(errors="surrogatepass") if isinstance(raw, str) else bytes(raw)
    if len(data) > MAX_MESSAGE_BYTES:
        raise InvalidMessage(f"{what}: {len(data)} bytes, larger than the "
                             f"{MAX_MESSAGE_BYTES} a message may be")
    if nesting_depth(data) > MAX_DEPTH:
        raise InvalidMessage(f"{what}: nested deeper than {MAX_DEPTH} levels")
    try:
        return json.loads(data)
    except (ValueError, UnicodeDecodeError, RecursionError) as exc:
        raise InvalidMessage(f"{what}: not valid JSON ({exc.__class__.__name__})") from None

"""Instance status records (`/instances/<uuid>`): states and their fields.

    SCHEDULED -> BUILDING -> ACTIVE -> DELETING -> DELETED
                     \\-> ERROR (build failed; allocation freed, nothing left)

The compute host moves a record only with an etcd transaction that compares
the revision it read, so an event delivered twice never builds twice.
"""

from __future__ import annotations

import time
from typing import Any

SCHEDULED = "SCHEDULED"
BUILDING = "BUILDING"
ACTIVE = "ACTIVE"
ERROR = "ERROR"
DELETING = "DELETING"
DELETED = "DELETED"

FINAL = frozenset({ACTIVE, ERROR, DELETED})


def from_spec(spec: dict[str, Any], state: str, host_name: str | None = None) -> dict[str, Any]:
    """A new record for the instance in `spec`."""
    now = time.time()
    return {
        "uuid": spec["uuid"],
        "state": state,
        "name": spec.get("name"),
        "host": spec["host"],
        "host_name": host_name,
        "ip": None,
        "error": None,
        "resources": spec["resources"],
        "image": spec.get("image", {}).get("url"),
        "group": (spec.get("group") or {}).get("name"),
        "created_at": spec.get("requested_at", now),
        "updated_at": now,
    }


def moved(record: dict[str, Any], state: str, **fields: Any) -> dict[str, Any]:
    """`record` in `state`, with `fields` changed and a fresh updated_at."""
    return {**record, **fields, "state": state, "updated_at": time.time()}


def error_record(uuid: str, host: str | None, reason: str) -> dict[str, Any]:
    """An ERROR record for an instance whose spec could not even be read."""
    now = time.time()
    return {"uuid": uuid, "state": ERROR, "host": host, "error": reason,
            "created_at": now, "updated_at": now}

"""An instance action and its events as Nova shows them at a microversion."""

from __future__ import annotations

import datetime
from typing import Any

from etcd_compute.api.objects.instance_actions import Action, host_id
from etcd_compute.api.wsgi import ApiRequest


def nova_time(timestamp: float | None) -> str | None:
    """A time as Nova's instance actions give it: UTC, microseconds, no zone."""
    if timestamp is None:
        return None
    when = datetime.datetime.fromtimestamp(timestamp, datetime.UTC)
    return when.strftime("%Y-%m-%dT%H:%M:%S.%f")


def action(req: ApiRequest, found: Action) -> dict[str, Any]:
    shown = {"action": found.action, "instance_uuid": found.instance_uuid,
             "request_id": found.request_id, "user_id": found.user_id,
             "project_id": found.project_id, "start_time": nova_time(found.start_time),
             "message": found.message}
    if req.version.at_least("2.58"):
        shown["updated_at"] = nova_time(found.updated_at)
    return shown


def event(req: ApiRequest, found: Action, project_id: str, *, traceback: bool,
          host: bool, details: bool = False) -> dict[str, Any]:
    """Its event: the traceback (our error) and host to those the policy lets see them;
    from 2.62 the obfuscated hostId to all; from 2.84 the details (the error's one line)
    to those the `events:details` rule lets see them."""
    shown: dict[str, Any] = {"event": found.event, "start_time": nova_time(found.start_time),
                             "finish_time": nova_time(found.finish_time),
                             "result": found.result or None}
    if traceback:
        shown["traceback"] = found.traceback
    if req.version.at_least("2.62"):
        if host:
            shown["host"] = found.host_name or ""
        shown["hostId"] = host_id(found.project_id or project_id, found.host)
    if details:
        shown["details"] = found.traceback
    return shown

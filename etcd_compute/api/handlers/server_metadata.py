"""/servers/{id}/metadata[/{key}] (Nova's server metadata controller): the server's
metadata in its view; changes compared with the view as read (tried again when it moved),
within the project's metadata_items quota, while the server is ACTIVE or SHUTOFF with no
task (Nova's states for it)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import webob

from etcd_compute.api import policy, validation
from etcd_compute.api.backend import Backend
from etcd_compute.api.handlers.action_checks import check_state
from etcd_compute.api.handlers.servers import check_lock, lookup
from etcd_compute.api.objects.servers import Server, ServerChanged
from etcd_compute.api.schemas import server_metadata as schema
from etcd_compute.api.wsgi import (
    ApiRequest,
    Fault,
    Router,
    bad_request,
    empty_response,
    json_response,
    not_found,
)

TRIES = 5
# Nova's states where metadata may change (ACTIVE, PAUSED, SUSPENDED, STOPPED; no task).
CHANGEABLE = {"active", "paused", "suspended", "stopped"}


def routes(router: Router, api: Backend) -> None:
    base = "/servers/{server_id}/metadata"
    router.add("GET", base, lambda req, server_id: index(api, req, server_id))
    router.add("POST", base, lambda req, server_id: create(api, req, server_id))
    router.add("PUT", base, lambda req, server_id: update_all(api, req, server_id))
    router.add("GET", base + "/{key}", lambda req, server_id, key: show(api, req, server_id, key))
    router.add("PUT", base + "/{key}",
               lambda req, server_id, key: update(api, req, server_id, key))
    router.add("DELETE", base + "/{key}",
               lambda req, server_id, key: delete(api, req, server_id, key))


def _server(api: Backend, req: ApiRequest, server_id: str, rule: str) -> Server:
    server = lookup(api, req, server_id)
    api.policy.authorize(req.context, policy.SERVER_METADATA % rule,
                         {"project_id": server.project_id})
    return server


def _change(api: Backend, req: ApiRequest, server: Server, action: str,
            change: Callable[[dict[str, str]], dict[str, str]]) -> dict[str, str]:
    """The metadata `change` makes of the server's, written if the view did not move
    since it was read (else read again); 403 beyond metadata_items, 409 in a state Nova
    takes no change in."""
    for _ in range(TRIES):
        check_lock(req, server)  # Nova's metadata changes check the lock too
        check_state(server, action, CHANGEABLE)
        metadata = change(dict(server.doc.get("metadata") or {}))
        allowed = api.quotas.limits(server.project_id)["metadata_items"]
        if 0 <= allowed < len(metadata):
            raise Fault(403, f"Maximum number of metadata items exceeds {allowed}")
        try:
            api.servers.save(server, {"metadata": metadata})
            return metadata
        except ServerChanged:
            server = lookup(api, req, server.uuid)
    raise Fault(409, f"Instance {server.uuid} kept changing; try again.")


def index(api: Backend, req: ApiRequest, server_id: str) -> webob.Response:
    server = _server(api, req, server_id, "index")
    return json_response({"metadata": dict(server.doc.get("metadata") or {})})


def show(api: Backend, req: ApiRequest, server_id: str, key: str) -> webob.Response:
    server = _server(api, req, server_id, "show")
    metadata = server.doc.get("metadata") or {}
    if key not in metadata:
        raise not_found("Metadata item was not found")
    return json_response({"meta": {key: metadata[key]}})


def create(api: Backend, req: ApiRequest, server_id: str) -> webob.Response:
    body = req.json_body()
    validation.body(schema.create, body)
    server = _server(api, req, server_id, "create")
    given: dict[str, Any] = body["metadata"]
    merged = _change(api, req, server, "update metadata", lambda now: {**now, **given})
    return json_response({"metadata": merged})


def update_all(api: Backend, req: ApiRequest, server_id: str) -> webob.Response:
    body = req.json_body()
    validation.body(schema.update_all, body)
    server = _server(api, req, server_id, "update_all")
    given: dict[str, Any] = body["metadata"]
    return json_response({"metadata": _change(api, req, server, "update metadata",
                                              lambda _now: dict(given))})


def update(api: Backend, req: ApiRequest, server_id: str, key: str) -> webob.Response:
    body = req.json_body()
    validation.body(schema.update, body)
    server = _server(api, req, server_id, "update")
    item: dict[str, Any] = body["meta"]
    if key not in item:
        raise bad_request("Request body and URI mismatch")
    _change(api, req, server, "update metadata", lambda now: {**now, **item})
    return json_response({"meta": item})


def delete(api: Backend, req: ApiRequest, server_id: str, key: str) -> webob.Response:
    server = _server(api, req, server_id, "delete")
    if key not in (server.doc.get("metadata") or {}):
        raise not_found("Metadata item was not found")
    _change(api, req, server, "delete metadata",
            lambda now: {k: v for k, v in now.items() if k != key})
    return empty_response(204)

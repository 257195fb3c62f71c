"""/servers/{id}/tags (Nova's server_tags controller, from 2.26): a server's tags, kept
in its view. Changed only while the server is ACTIVE or SHUTOFF (Nova: active, paused,
suspended, stopped), else 409."""

from __future__ import annotations

from collections.abc import Callable

import jsonschema
import webob

from etcd_compute.api import policy, validation
from etcd_compute.api.backend import Backend
from etcd_compute.api.objects.servers import Server, ServerChanged
from etcd_compute.api.schemas import parameter_types as types
from etcd_compute.api.schemas import servers as schema
from etcd_compute.api.views import servers as view
from etcd_compute.api.wsgi import (
    ApiRequest,
    Fault,
    Router,
    bad_request,
    empty_response,
    json_response,
    not_found,
)

Lookup = Callable[[ApiRequest, str], Server]


def routes(router: Router, api: Backend, lookup: Lookup) -> None:
    router.add("GET", "/servers/{server_id}/tags",
               lambda req, server_id: index(api, req, lookup(req, server_id)))
    router.add("PUT", "/servers/{server_id}/tags",
               lambda req, server_id: update_all(api, req, lookup(req, server_id)))
    router.add("DELETE", "/servers/{server_id}/tags",
               lambda req, server_id: delete_all(api, req, lookup(req, server_id)))
    router.add("GET", "/servers/{server_id}/tags/{tag}",
               lambda req, server_id, tag: show(api, req, lookup(req, server_id), tag))
    router.add("PUT", "/servers/{server_id}/tags/{tag}",
               lambda req, server_id, tag: update(api, req, lookup(req, server_id), tag))
    router.add("DELETE", "/servers/{server_id}/tags/{tag}",
               lambda req, server_id, tag: delete(api, req, lookup(req, server_id), tag))


def _available(req: ApiRequest) -> None:
    if not req.version.at_least("2.26"):
        raise not_found("The resource could not be found.")


def _authorized(api: Backend, req: ApiRequest, server: Server, action: str) -> None:
    _available(req)
    api.policy.authorize(req.context, policy.SERVER_TAGS % action,
                         {"project_id": server.project_id})


def _changeable(server: Server, action: str) -> None:
    vm_state = view.nova_states(server)[0]
    if vm_state not in ("active", "stopped"):
        raise Fault(409, f"Cannot '{action}' instance {server.uuid} while it is in vm_state "
                         f"{vm_state}")


def _tags(server: Server) -> list[str]:
    return list(server.doc.get("tags") or [])


def _write(api: Backend, server: Server, tags: list[str]) -> None:
    try:
        api.servers.save(server, {"tags": tags})
    except ServerChanged:
        raise Fault(409, f"Instance {server.uuid} changed meanwhile; try again.") from None


def index(api: Backend, req: ApiRequest, server: Server) -> webob.Response:
    _authorized(api, req, server, "index")
    return json_response({"tags": _tags(server)})


def show(api: Backend, req: ApiRequest, server: Server, tag: str) -> webob.Response:
    _authorized(api, req, server, "show")
    if tag not in _tags(server):
        raise not_found(f"Server {server.uuid} has no tag '{tag[:60]}'")
    return empty_response(204)


def update_all(api: Backend, req: ApiRequest, server: Server) -> webob.Response:
    _authorized(api, req, server, "update_all")
    body = req.json_body()
    validation.body(schema.tags_update, body)
    _changeable(server, "update tags")
    tags = list(dict.fromkeys(body["tags"]))
    _write(api, server, tags)
    return json_response({"tags": tags})


def delete_all(api: Backend, req: ApiRequest, server: Server) -> webob.Response:
    _authorized(api, req, server, "delete_all")
    _changeable(server, "delete tags")
    _write(api, server, [])
    return empty_response(204)


def update(api: Backend, req: ApiRequest, server: Server, tag: str) -> webob.Response:
    _authorized(api, req, server, "update")
    _changeable(server, "update tag")
    try:
        jsonschema.validate(tag, types.tag)
    except jsonschema.ValidationError as exc:
        raise bad_request(f"Tag '{tag[:60]}' is invalid. It must be a non empty string "
                          "without characters '/' and ','. Validation error message: "
                          f"{exc.message[:200]}") from None
    tags = _tags(server)
    if len(tags) >= types.MAX_TAG_COUNT:
        raise bad_request(f"The number of tags exceeded the per-server limit "
                          f"{types.MAX_TAG_COUNT}")
    if tag in tags:
        return empty_response(204)
    _write(api, server, [*tags, tag])
    response = empty_response(201)
    response.headers["Location"] = view.links(req, "servers", server.uuid)[0]["href"] + \
        f"/tags/{tag}"
    return response


def delete(api: Backend, req: ApiRequest, server: Server, tag: str) -> webob.Response:
    _authorized(api, req, server, "delete")
    _changeable(server, "delete tag")
    tags = _tags(server)
    if tag not in tags:
        raise not_found(f"Server {server.uuid} has no tag '{tag[:60]}'")
    _write(api, server, [t for t in tags if t != tag])
    return empty_response(204)

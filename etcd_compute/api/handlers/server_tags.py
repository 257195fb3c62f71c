"""/servers/{id}/tags (Nova's server_tags controller, from 2.26): a server's tags, kept
in its view. Changed only while the server is ACTIVE or SHUTOFF (Nova: active, paused,
suspended, stopped), else 409.

As Nova, the server is found in any project (Nova reads its cell mapping, which is not
the project's) and the rule decides on its project: another project's member is refused
(403), where the servers' other calls answer 404; an unknown server is Nova's 404 "has no
mapping to a cell"."""

from __future__ import annotations

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


def routes(router: Router, api: Backend) -> None:
    router.add("GET", "/servers/{server_id}/tags",
               lambda req, server_id: index(api, req, server_id))
    router.add("PUT", "/servers/{server_id}/tags",
               lambda req, server_id: update_all(api, req, server_id))
    router.add("DELETE", "/servers/{server_id}/tags",
               lambda req, server_id: delete_all(api, req, server_id))
    router.add("GET", "/servers/{server_id}/tags/{tag}",
               lambda req, server_id, tag: show(api, req, server_id, tag))
    router.add("PUT", "/servers/{server_id}/tags/{tag}",
               lambda req, server_id, tag: update(api, req, server_id, tag))
    router.add("DELETE", "/servers/{server_id}/tags/{tag}",
               lambda req, server_id, tag: delete(api, req, server_id, tag))


def _available(req: ApiRequest) -> None:
    if not req.version.at_least("2.26"):
        raise not_found("The resource could not be found.")


def _authorized(api: Backend, req: ApiRequest, server_id: str, action: str) -> Server:
    """The server, of any project (Nova's cell mapping lookup), if the rule lets the caller
    act on its project."""
    _available(req)
    server = api.servers.get(server_id)
    if server is None:
        raise not_found(f"Instance {server_id[:100]} has no mapping to a cell.")
    api.policy.authorize(req.context, policy.SERVER_TAGS % action,
                         {"project_id": server.project_id})
    return server


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


def index(api: Backend, req: ApiRequest, server_id: str) -> webob.Response:
    server = _authorized(api, req, server_id, "index")
    return json_response({"tags": _tags(server)})


def show(api: Backend, req: ApiRequest, server_id: str, tag: str) -> webob.Response:
    server = _authorized(api, req, server_id, "show")
    if tag not in _tags(server):
        raise not_found(f"Server {server.uuid} has no tag '{tag[:60]}'")
    return empty_response(204)


def update_all(api: Backend, req: ApiRequest, server_id: str) -> webob.Response:
    server = _authorized(api, req, server_id, "update_all")
    body = req.json_body()
    validation.body(schema.tags_update, body)
    _changeable(server, "update tags")
    tags = list(dict.fromkeys(body["tags"]))
    _write(api, server, tags)
    return json_response({"tags": tags})


def delete_all(api: Backend, req: ApiRequest, server_id: str) -> webob.Response:
    server = _authorized(api, req, server_id, "delete_all")
    _changeable(server, "delete tags")
    _write(api, server, [])
    return empty_response(204)


def update(api: Backend, req: ApiRequest, server_id: str, tag: str) -> webob.Response:
    server = _authorized(api, req, server_id, "update")
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


def delete(api: Backend, req: ApiRequest, server_id: str, tag: str) -> webob.Response:
    server = _authorized(api, req, server_id, "delete")
    _changeable(server, "delete tag")
    tags = _tags(server)
    if tag not in tags:
        raise not_found(f"Server {server.uuid} has no tag '{tag[:60]}'")
    _write(api, server, [t for t in tags if t != tag])
    return empty_response(204)

"""/servers/{id}/os-volume_attachments[/{volume_id}] (Nova's volume attachments controller),
read-only: this cloud has no block storage (no Cinder in the catalog), so a server has no
volume attached, as a Nova server booted from an image without volumes has none. The list
is empty and one attachment is not found, each after the server is found and its policy
passed; attaching, detaching and swapping are not served (Nova's router would route them;
ours answers 404 for the path, as for any other API it does not offer)."""

from __future__ import annotations

import webob

from etcd_compute.api import policy
from etcd_compute.api.backend import Backend
from etcd_compute.api.handlers.servers import lookup
from etcd_compute.api.wsgi import ApiRequest, Router, json_response, not_found


def routes(router: Router, api: Backend) -> None:
    router.add("GET", "/servers/{server_id}/os-volume_attachments",
               lambda req, server_id: index(api, req, server_id))
    router.add("GET", "/servers/{server_id}/os-volume_attachments/{volume_id}",
               lambda req, server_id, volume_id: show(api, req, server_id, volume_id))


def index(api: Backend, req: ApiRequest, server_id: str) -> webob.Response:
    server = lookup(api, req, server_id)
    api.policy.authorize(req.context, policy.VOLUME_ATTACHMENTS % "index",
                         {"project_id": server.project_id})
    return json_response({"volumeAttachments": []})


def show(api: Backend, req: ApiRequest, server_id: str, volume_id: str) -> webob.Response:
    server = lookup(api, req, server_id)
    api.policy.authorize(req.context, policy.VOLUME_ATTACHMENTS % "show",
                         {"project_id": server.project_id})
    raise not_found(f"Instance {server_id} is not attached to volume {volume_id}")

"""/servers/{id}/os-server-password (Nova's server_password.py): the encrypted password a
guest posted to its metadata server, and its clearing. Our metadata server takes no
password from a guest, so there is never one: GET answers `""` (Nova's answer for a server
without one) and DELETE 204, after the server's lookup (404) and the rule (403)."""

from __future__ import annotations

import webob

from etcd_compute.api import policy
from etcd_compute.api.backend import Backend
from etcd_compute.api.handlers import action_checks as checks
from etcd_compute.api.wsgi import ApiRequest, Router, empty_response, json_response


def routes(router: Router, api: Backend) -> None:
    router.add("GET", "/servers/{server_id}/os-server-password",
               lambda req, server_id: show(api, req, server_id))
    router.add("DELETE", "/servers/{server_id}/os-server-password",
               lambda req, server_id: clear(api, req, server_id))


def show(api: Backend, req: ApiRequest, server_id: str) -> webob.Response:
    checks.server_for(api, req, server_id, policy.SERVER_PASSWORD % "show", locked_ok=True)
    return json_response({"password": ""})


def clear(api: Backend, req: ApiRequest, server_id: str) -> webob.Response:
    checks.server_for(api, req, server_id, policy.SERVER_PASSWORD % "clear", locked_ok=True)
    return empty_response(204)

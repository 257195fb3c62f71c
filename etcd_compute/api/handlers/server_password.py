"""/servers/{id}/os-server-password (Nova's server_password.py): the password a guest
POSTed to its metadata server (often encrypted with the server's key pair), and its
clearing: GET `{"password": ...}` (`""` without one), DELETE 204, after the server's lookup
(404) and the rule (403), whatever the lock (`objects/server_passwords.py`)."""

from __future__ import annotations

import webob

from etcd_compute.api import policy
from etcd_compute.api.backend import Backend
from etcd_compute.api.handlers import action_checks as checks
from etcd_compute.api.objects.server_passwords import ServerPasswords
from etcd_compute.api.wsgi import ApiRequest, Router, empty_response, json_response


def routes(router: Router, api: Backend) -> None:
    router.add("GET", "/servers/{server_id}/os-server-password",
               lambda req, server_id: show(api, req, server_id))
    router.add("DELETE", "/servers/{server_id}/os-server-password",
               lambda req, server_id: clear(api, req, server_id))


def show(api: Backend, req: ApiRequest, server_id: str) -> webob.Response:
    server = checks.server_for(api, req, server_id, policy.SERVER_PASSWORD % "show",
                               locked_ok=True)
    return json_response({"password": ServerPasswords(api.store).show(server)})


def clear(api: Backend, req: ApiRequest, server_id: str) -> webob.Response:
    server = checks.server_for(api, req, server_id, policy.SERVER_PASSWORD % "clear",
                               locked_ok=True)
    ServerPasswords(api.store).clear(server)
    return empty_response(204)

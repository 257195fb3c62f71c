"""POST /os-server-external-events (Nova's controller; the service role: Neutron, Cinder
and Cyborg tell Nova what happened to a server's ports, volumes, accelerators). We run
none of those services, so nothing here waits for such an event: each event for a server
we have is accepted and, as Nova does with an event no one waits for, ignored (code 200,
its status as sent); one for a server we do not have is 404 (status failed); one for a
server with no host yet is 422. All refused: 404; some: 207 (Nova's)."""

from __future__ import annotations

from typing import Any

import webob

from etcd_compute.api import policy, validation
from etcd_compute.api.backend import Backend
from etcd_compute.api.schemas import server_external_events as schema
from etcd_compute.api.wsgi import ApiRequest, Router, json_response, not_found


def routes(router: Router, api: Backend) -> None:
    router.add("POST", "/os-server-external-events", lambda req: create(api, req))


def create(api: Backend, req: ApiRequest) -> webob.Response:
    body = req.json_body()
    validation.body(schema.create_schema(req.version), body)
    api.policy.authorize(req.context, policy.EXTERNAL_EVENTS, {})
    answered: list[dict[str, Any]] = []
    for event in body["events"]:
        shown: dict[str, Any] = {"name": event["name"], "server_uuid": event["server_uuid"],
                                 "status": event.get("status", "completed")}
        if "tag" in event:
            shown["tag"] = event["tag"]
        server = api.servers.get(event["server_uuid"].lower())
        if server is None:
            shown.update(code=404, status="failed")
        elif server.host is None:
            shown.update(code=422, status="failed")
        else:
            shown["code"] = 200
        answered.append(shown)
    accepted = sum(1 for e in answered if e["code"] == 200)
    if not accepted:
        raise not_found("No instances found for any event")
    return json_response({"events": answered}, 200 if accepted == len(answered) else 207)

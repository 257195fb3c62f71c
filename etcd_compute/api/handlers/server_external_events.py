"""POST /os-server-external-events (Nova's controller; the service role or an admin: Neutron,
Cinder and Cyborg tell Nova what happened to a server's ports, volumes, accelerators). Each
event for a server we have (the API's own, or one `schedule.py` placed) is handed to its
host, as Nova's API casts it to the server's compute: appended to the instance's key under
the host's prefix (`instances/external_events.py`), where a build waiting for its ports'
`network-vif-plugged` finds it (`compute/plugging.py`); code 200, its status as sent. One
for a server we do not have is 404 (status failed); one for a server with no host yet 422.
All refused: 404; some: 207 (Nova's)."""

from __future__ import annotations

import time
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
    # Per instance: its host, and its events as the host keeps them (one write each).
    handing: dict[str, tuple[str, list[dict[str, Any]], list[dict[str, Any]]]] = {}
    for event in body["events"]:
        shown: dict[str, Any] = {"name": event["name"], "server_uuid": event["server_uuid"],
                                 "status": event.get("status", "completed")}
        if "tag" in event:
            shown["tag"] = event["tag"]
        uuid = event["server_uuid"].lower()
        known, host = (True, handing[uuid][0]) if uuid in handing else \
            api.servers.events_host(uuid)
        if not known:
            shown.update(code=404, status="failed")
        elif host is None:
            shown.update(code=422, status="failed")
        else:
            shown["code"] = 200
            _, kept, answers = handing.setdefault(uuid, (host, [], []))
            kept.append({"name": shown["name"], "status": shown["status"], "at": time.time(),
                         **({"tag": shown["tag"]} if "tag" in shown else {})})
            answers.append(shown)
        answered.append(shown)
    for uuid, (host, kept, answers) in handing.items():
        if not api.servers.hand_events(host, uuid, kept):  # its record went meanwhile
            for shown in answers:
                shown.update(code=404, status="failed")
    accepted = sum(1 for e in answered if e["code"] == 200)
    if not accepted:
        raise not_found("No instances found for any event")
    return json_response({"events": answered}, 200 if accepted == len(answered) else 207)

"""GET /servers/{id}/diagnostics (admins; Nova's server-diagnostics controller).

The guest's figures as its host last published them with its console (at ACTIVE, then
while the console is followed: docs/reference/compute-api.md), in Nova's 2.48 shape; uptime
counted from the instance's launch as Nova counts it. Before 2.48 Nova's answer is the
driver's own flat dictionary: ours names the same figures (`cpu0_time`, `memory`,
`disk0_read`...). A server that does not run is 409, as Nova's; one whose host has
published nothing (yet) too.
"""

from __future__ import annotations

import time
from typing import Any

import webob

from etcd_compute.api import policy
from etcd_compute.api.backend import Backend
from etcd_compute.api.handlers import servers as server_handlers
from etcd_compute.api.views import servers as view
from etcd_compute.api.wsgi import ApiRequest, Fault, Router, json_response


def routes(router: Router, api: Backend) -> None:
    router.add("GET", "/servers/{server_id}/diagnostics",
               lambda req, server_id: show(api, req, server_id))


def show(api: Backend, req: ApiRequest, server_id: str) -> webob.Response:
    server = server_handlers.lookup(api, req, server_id)
    api.policy.authorize(req.context, policy.SERVER_DIAGNOSTICS,
                         {"project_id": server.project_id})
    vm_state, _, power_state = view.nova_states(server)
    if vm_state == "building":
        raise Fault(409, f"Cannot 'get_diagnostics' instance {server.uuid} while it is in "
                         f"vm_state {vm_state}")
    if power_state != view.RUNNING:
        raise Fault(409, f"Instance {server.uuid} in power state {power_state}. Cannot "
                         "get_diagnostics while the instance is in this state.")
    found = api.actions.diagnostics(server)
    if found is None:
        raise Fault(409, f"Instance {server.uuid}: its host has published no diagnostics "
                         "yet")
    launched = (server.record or {}).get("launched_at")
    found = {**found, "uptime": int(time.time() - float(launched)) if launched else None}
    if req.version.at_least("2.48"):
        return json_response(found)
    return json_response(legacy(found))


def legacy(found: dict[str, Any]) -> dict[str, Any]:
    """The flat dictionary Nova's drivers answered before 2.48 (libvirt's names where
    ours have them)."""
    flat: dict[str, Any] = {}
    for cpu in found["cpu_details"]:
        flat[f"cpu{cpu['id']}_time"] = cpu["time"]
    memory = found["memory_details"]
    flat["memory"] = memory["maximum"] * 1024 if memory["maximum"] is not None else None
    if memory["used"] is not None:
        flat["memory-actual"] = memory["used"] * 1024
    for n, disk in enumerate(found["disk_details"]):
        for key, name in (("read_bytes", "read"), ("read_requests", "read_req"),
                          ("write_bytes", "write"), ("write_requests", "write_req"),
                          ("errors_count", "errors")):
            flat[f"disk{n}_{name}"] = disk[key]
    for n, nic in enumerate(found["nic_details"]):
        for key in ("rx_octets", "rx_packets", "rx_errors", "rx_drop", "tx_octets",
                    "tx_packets", "tx_errors", "tx_drop"):
            flat[f"nic{n}_{key}"] = nic[key]
    flat["uptime"] = found["uptime"]
    return flat

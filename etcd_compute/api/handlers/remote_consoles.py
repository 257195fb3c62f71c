"""Remote consoles, as Nova's `remote_consoles.py` answers them: `POST
/servers/{id}/remote-consoles` (2.6+) and the old actions `os-getVNCConsole`,
`os-getSPICEConsole`, `os-getSerialConsole`, `os-getRDPConsole` (2.1-2.5; from 2.6 they are
404, as Nova's). We serve one console: VNC through noVNC (`novnc`); the rest is refused with
Nova's errors as a Nova with only VNC enabled gives them: SPICE, serial and MKS "Unavailable
console type X." (400), `xvpvnc` "Invalid console type xvpvnc" (400), RDP gone (400).

The checks in Nova's order: the body's schema (400); for the old actions the rule on the
caller's own project, then the server (404 for another project's); for remote-consoles the
server (404), then the rule on its project (403); then Nova's compute API (`check_instance_host`:
no host yet is 409 "Instance X is not ready"; `reject_instance_state`: deleting or migrating
is 409 on the old VNC action, 400 elsewhere as Nova's Invalid); then the host's manager
(the host serves no console: 400 "Unavailable console type X."; the type; a guest still
building: 409 not ready). The URL carries a single-use token of `console.token_ttl_seconds`
(`remote_consoles.py`) that names the server only.
"""

from __future__ import annotations

from typing import Any

import webob

from etcd_compute.api import policy, validation
from etcd_compute.api.backend import Backend
from etcd_compute.api.handlers import action_checks as checks
from etcd_compute.api.handlers import servers as server_handlers
from etcd_compute.api.objects.servers import Server
from etcd_compute.api.schemas import remote_consoles as schema
from etcd_compute.api.views import servers as view
from etcd_compute.api.wsgi import ApiRequest, Fault, Router, bad_request, json_response, not_found
from etcd_compute.ops.operations import (
    NoRemoteConsole,
    remote_console_url,
    serves_remote_consoles,
)

# Nova's compute API refuses a console while the server is in these task states.
REJECTED_TASK_STATES = ("deleting", "migrating")
# webob's HTTPBadRequest without an explanation: what Nova's removed RDP action answers.
BAD_REQUEST = ("The server could not comply with the request since it is either malformed "
               "or otherwise incorrect.")


def routes(router: Router, api: Backend) -> None:
    router.add("POST", "/servers/{server_id}/remote-consoles",
               lambda req, server_id: create(api, req, server_id))


def _version_not_found() -> Fault:
    """Nova's answer for a method outside its microversions: a bare 404."""
    return not_found("The resource could not be found.")


def create(api: Backend, req: ApiRequest, server_id: str) -> webob.Response:
    if not req.version.at_least("2.6"):
        raise _version_not_found()
    body = req.json_body()
    validation.body(schema.create_schema(req.version), body)
    server = server_handlers.lookup(api, req, server_id)
    api.policy.authorize(req.context, policy.REMOTE_CONSOLES,
                         {"project_id": server.project_id})
    protocol = body["remote_console"]["protocol"]
    console_type = body["remote_console"]["type"]
    if protocol == "rdp":
        raise bad_request(f"Unavailable console type {protocol}.")
    url = _console(api, req, server, protocol, console_type, old_action=False)
    return json_response({"remote_console": {"protocol": protocol, "type": console_type,
                                             "url": url}})


def _old_action(protocol: str, name: str, action_schema: dict[str, Any]) -> Any:
    def action(api: Backend, req: ApiRequest, server_id: str, body: Any) -> webob.Response:
        if req.version.at_least("2.6"):
            raise _version_not_found()
        validation.body(action_schema, body)
        api.policy.authorize(req.context, policy.REMOTE_CONSOLES)
        console_type = body[name]["type"]
        server = server_handlers.lookup(api, req, server_id)
        url = _console(api, req, server, protocol, console_type, old_action=True)
        return json_response({"console": {"type": console_type, "url": url}})

    return action


def get_rdp_console(api: Backend, req: ApiRequest, server_id: str, body: Any
                    ) -> webob.Response:
    """Gone from Nova with Hyper-V (29.0.0): every call is a bare 400."""
    if req.version.at_least("2.6"):
        raise _version_not_found()
    raise bad_request(BAD_REQUEST)


def _console(api: Backend, req: ApiRequest, server: Server, protocol: str,
             console_type: str, old_action: bool) -> str:
    """The console URL, or Nova's refusal (see the module's docstring for the order)."""
    if server.host is None:
        raise Fault(409, f"Instance {server.uuid} is not ready")
    vm_state, task_state, _ = view.nova_states(server)
    method = {"vnc": "get_vnc_console", "spice": "get_spice_console",
              "serial": "get_serial_console", "mks": "get_mks_console"}[protocol]
    if task_state in REJECTED_TASK_STATES:
        if old_action and protocol == "vnc":
            raise Fault(409, f"Cannot '{method}' instance {server.uuid} while it is in "
                             f"task_state {task_state}")
        raise bad_request(f"Instance {server.uuid} in task_state {task_state}. Cannot "
                          f"{method} while the instance is in this state.")
    # The host's manager: only VNC is enabled, and only on a host that relays it.
    if protocol != "vnc" or not serves_remote_consoles(api.store, server.host):
        raise bad_request(f"Unavailable console type {console_type}.")
    if console_type != "novnc":
        raise bad_request(f"Invalid console type {console_type}")
    if vm_state == "building":
        raise Fault(409, f"Instance {server.uuid} is not ready")
    try:
        return remote_console_url(api.store, server.uuid, server.host,
                                  api.config["console"], checks.caller(req))
    except NoRemoteConsole:  # its relay went away meanwhile
        raise bad_request(f"Unavailable console type {console_type}.") from None


ACTIONS = {
    "os-getVNCConsole": _old_action("vnc", "os-getVNCConsole", schema.get_vnc_console),
    "os-getSPICEConsole": _old_action("spice", "os-getSPICEConsole", schema.get_spice_console),
    "os-getSerialConsole": _old_action("serial", "os-getSerialConsole",
                                       schema.get_serial_console),
    "os-getRDPConsole": get_rdp_console,
}

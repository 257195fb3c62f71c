"""POST /servers/{id}/action: os-resetState, injectNetworkInfo, lock, unlock, restore,
forceDelete (Nova's admin-actions, lock-server and deferred-delete controllers).

These change only the API's view of the server, as Nova's change only its database:
- os-resetState (admins): the vm_state shown is `active` or `error`, task_state none,
  until the instance moves on (an action its host takes up, a power change); the host
  and the guest are not touched. A server reset to error takes what Nova takes in error
  (a rebuild, a hard reboot, a stop), which then go to the host as ever.
- lock / unlock: a locked server refuses a non-admin's actions and delete (409, Nova's
  `check_instance_lock`); `locked_by` is the owner or an admin, and a lock an admin set
  is undone by an admin only (the unlock_override rule, 403).
- restore / forceDelete act on a SOFT_DELETED server; soft delete is off here (a delete
  is a delete, as Nova's with reclaim_instance_interval 0), so there is never one: 409
  with Nova's message, after the server's lookup (404) and rule (403).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import webob

from etcd_compute.api import policy, validation
from etcd_compute.api.backend import Backend
from etcd_compute.api.handlers import action_checks as checks
from etcd_compute.api.handlers import servers as server_handlers
from etcd_compute.api.objects.servers import Server, ServerChanged
from etcd_compute.api.schemas import server_admin_actions as schema
from etcd_compute.api.wsgi import ApiRequest, Fault, empty_response


def _save(api: Backend, req: ApiRequest, server: Server,
          change: Callable[[Server], dict[str, Any]]) -> None:
    """Write `change(server)` to the view, read again and retried if it changed meanwhile."""
    for _ in range(5):
        try:
            api.servers.save(server, change(server))
            return
        except ServerChanged:
            server = server_handlers.lookup(api, req, server.uuid)
    raise Fault(409, f"Instance {server.uuid} kept changing; try again.")


def reset_state(api: Backend, req: ApiRequest, server_id: str, body: Any) -> webob.Response:
    validation.body(schema.reset_state, body)
    server = checks.server_for(api, req, server_id, policy.ADMIN_ACTIONS % "reset_state",
                               locked_ok=True)
    vm_state = body["os-resetState"]["state"]

    def change(now: Server) -> dict[str, Any]:
        return {"reset": {"vm_state": vm_state, "state": now.state,
                          "request_id": (now.record or {}).get("request_id"),
                          "at": time.time()},
                "task": None}

    _save(api, req, server, change)
    return empty_response(202)


def lock(api: Backend, req: ApiRequest, server_id: str, body: Any) -> webob.Response:
    if req.version.at_least("2.73"):
        validation.body(schema.lock_v2_73, body)
    server = checks.server_for(api, req, server_id, policy.LOCK_SERVER % "lock",
                               locked_ok=True)
    asked = body.get("lock") if req.version.at_least("2.73") else None
    reason = asked.get("locked_reason") if isinstance(asked, dict) else None
    by = "owner" if server.project_id == req.context.project_id else "admin"
    _save(api, req, server, lambda _now: {"lock": {"by": by, "reason": reason}})
    return empty_response(202)


def unlock(api: Backend, req: ApiRequest, server_id: str, body: Any) -> webob.Response:
    server = checks.server_for(api, req, server_id, policy.LOCK_SERVER % "unlock",
                               locked_ok=True)
    locked_by = (server.doc.get("lock") or {}).get("by")
    expected = "owner" if server.project_id == req.context.project_id else "admin"
    if locked_by and locked_by != expected:
        api.policy.authorize(req.context, policy.LOCK_SERVER % "unlock:unlock_override",
                             {"project_id": server.project_id})
    _save(api, req, server, lambda _now: {"lock": None})
    return empty_response(202)


def _not_soft_deleted(action: str, rule: str) -> Callable[..., webob.Response]:
    def refuse(api: Backend, req: ApiRequest, server_id: str, _body: Any) -> webob.Response:
        server = checks.server_for(api, req, server_id, rule)
        checks.check_state(server, action, {"soft-delete"}, None)
        raise AssertionError("unreachable: no server is ever soft-deleted here")
    return refuse


def inject_network_info(api: Backend, req: ApiRequest, server_id: str, _body: Any
                        ) -> webob.Response:
    """injectNetworkInfo (admins): 202 after the lookup, the rule and the lock, and nothing
    else, as Nova's libvirt driver does nothing for it (only XenAPI's wrote the guest's
    network settings); a guest here reads its network from DHCP and its metadata."""
    checks.server_for(api, req, server_id, policy.ADMIN_ACTIONS % "inject_network_info")
    return empty_response(202)


ACTIONS = {
    "os-resetState": reset_state, "lock": lock, "unlock": unlock,
    "injectNetworkInfo": inject_network_info,
    "restore": _not_soft_deleted("restore", policy.DEFERRED_DELETE % "restore"),
    "forceDelete": _not_soft_deleted("forceDelete", policy.DEFERRED_DELETE % "force"),
}

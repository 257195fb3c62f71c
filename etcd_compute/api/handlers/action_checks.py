"""What every server action checks before it asks anything (Nova's compute API
decorators): the server the caller may see (404), the rule (403), the lock
(`check_instance_lock`: 409 for a non-admin) and the vm_state and task_state
(`check_instance_state`: 409); and how what the instance's path refuses is answered.
"""

from __future__ import annotations

from collections.abc import Callable, Collection
from typing import Any

from etcd_compute.api.backend import Backend
from etcd_compute.api.handlers import servers as server_handlers
from etcd_compute.api.objects.quotas import OverQuota
from etcd_compute.api.objects.servers import Server
from etcd_compute.api.views import servers as view
from etcd_compute.api.wsgi import ApiRequest, Fault, bad_request
from etcd_compute.errors import UsageError
from etcd_compute.instances.states import ActionRefused
from etcd_compute.ops.lifecycle import NoRoom
from etcd_compute.scheduler.spec import api_caller


def caller(req: ApiRequest) -> str:
    """Who asks, as the instance's events name them."""
    return api_caller(req.context.user_id, req.context.project_id)


def server_for(api: Backend, req: ApiRequest, server_id: str, rule: str,
               locked_ok: bool = False) -> Server:
    """The server (404 for one the caller may not see), the caller allowed by `rule`
    (403), and not locked unless the caller is an admin or `locked_ok` (409)."""
    server = server_handlers.lookup(api, req, server_id)
    api.policy.authorize(req.context, rule,
                         {"project_id": server.project_id, "user_id": server.doc["user_id"]})
    if not locked_ok:
        server_handlers.check_lock(req, server)
    return server


def check_state(server: Server, action: str, vm_states: Collection[str],
                task_states: Collection[str | None] | None = (None,)) -> None:
    """Nova's `check_instance_state`: 409 with Nova's message unless the server's vm_state
    and task_state allow `action`."""
    vm_state, task_state, _ = view.nova_states(server)
    if vm_state not in vm_states:
        raise Fault(409, f"Cannot '{action}' instance {server.uuid} while it is in "
                         f"vm_state {vm_state}")
    if task_states is not None and task_state not in task_states:
        raise Fault(409, f"Cannot '{action}' instance {server.uuid} while it is in "
                         f"task_state {task_state}")


def asked(call: Callable[[], Any]) -> Any:
    """What the instance's path refuses, as Nova's answers name it."""
    try:
        return call()
    except ActionRefused as exc:
        raise Fault(409, str(exc)) from None
    except NoRoom as exc:
        raise Fault(409, str(exc)) from None
    except OverQuota as exc:
        raise Fault(403, str(exc)) from None
    except UsageError as exc:
        raise bad_request(str(exc)) from None

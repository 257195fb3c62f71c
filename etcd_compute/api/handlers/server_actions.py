"""POST /servers/{id}/action: os-start, os-stop, reboot, rebuild, resize, confirmResize,
revertResize, createImage, os-getConsoleOutput, os-migrateLive (Nova's servers,
console-output and migrate-server controllers).

As Nova: the body names one action (an unknown one is 400 "There is no such action"),
its schema is checked first (400), then the server (404 for another project's), the
rule (403), and the server's vm_state and task_state as Nova's compute API checks them
(409 "Cannot 'resize' instance ... while it is in vm_state stopped"); the request then
goes to the server's host through the operator's one path (`ops/lifecycle.py`), which
may still refuse what the host cannot do here (409, its reason).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Collection
from typing import Any

import webob

from etcd_compute.api import policy, validation
from etcd_compute.api.backend import Backend
from etcd_compute.api.handlers import security_groups
from etcd_compute.api.handlers import servers as server_handlers
from etcd_compute.api.objects.quotas import OverQuota
from etcd_compute.api.objects.servers import Server
from etcd_compute.api.schemas import parameter_types as types
from etcd_compute.api.schemas import server_actions as schema
from etcd_compute.api.views import servers as view
from etcd_compute.api.wsgi import (
    ApiRequest,
    Fault,
    Router,
    bad_request,
    empty_response,
    json_response,
)
from etcd_compute.errors import NotFound, NoValidHost, UsageError
from etcd_compute.instances.states import ActionRefused
from etcd_compute.ops.lifecycle import NoRoom
from etcd_compute.scheduler.spec import api_caller

# Nova's vm_states and task_states an action is allowed from (compute/api.py).
ALLOW_REBOOT = {None, "rebooting", "reboot_pending", "reboot_started", "resuming",
                "rebooting_hard", "unpausing", "pausing", "suspending"}
# Control characters Nova removes from console output.
_CONSOLE_NOISE = re.compile("[\x00-\x08\x0b-\x1f]")

Action = Callable[[Backend, ApiRequest, str, Any], webob.Response]


def routes(router: Router, api: Backend) -> None:
    router.add("POST", "/servers/{server_id}/action",
               lambda req, server_id: action(api, req, server_id))


def action(api: Backend, req: ApiRequest, server_id: str) -> webob.Response:
    body = req.json_body()
    if not isinstance(body, dict) or len(body) != 1:
        raise bad_request("Malformed request body")
    name = next(iter(body))
    found = ACTIONS.get(name)
    if found is None:
        raise bad_request(f"There is no such action: {name[:100]}")
    return found(api, req, server_id, body)


def caller(req: ApiRequest) -> str:
    """Who asks, as the instance's events name them."""
    return api_caller(req.context.user_id, req.context.project_id)


def _server(api: Backend, req: ApiRequest, server_id: str, rule: str) -> Server:
    server = server_handlers.lookup(api, req, server_id)
    api.policy.authorize(req.context, rule,
                         {"project_id": server.project_id, "user_id": server.doc["user_id"]})
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


def _asked(call: Callable[[], Any]) -> Any:
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


# --- power ---------------------------------------------------------------------------------


def start(api: Backend, req: ApiRequest, server_id: str, body: Any) -> webob.Response:
    validation.body(schema.start, body)
    server = _server(api, req, server_id, policy.SERVERS % "start")
    check_state(server, "start", {"stopped"})
    _asked(lambda: api.actions.start(server, caller(req)))
    return empty_response(202)


def stop(api: Backend, req: ApiRequest, server_id: str, body: Any) -> webob.Response:
    validation.body(schema.stop, body)
    server = _server(api, req, server_id, policy.SERVERS % "stop")
    check_state(server, "stop", {"active", "error"})
    _asked(lambda: api.actions.stop(server, caller(req)))
    return empty_response(202)


def reboot(api: Backend, req: ApiRequest, server_id: str, body: Any) -> webob.Response:
    validation.body(schema.reboot, body)
    hard = body["reboot"]["type"].upper() == "HARD"
    server = _server(api, req, server_id, policy.SERVERS % "reboot")
    if hard:
        check_state(server, "reboot", {"active", "stopped", "paused", "suspended", "error"},
                    ALLOW_REBOOT)
    else:
        check_state(server, "reboot", {"active"})
    _asked(lambda: api.actions.reboot(server, hard, caller(req)))
    return empty_response(202)


# --- rebuild -------------------------------------------------------------------------------


def rebuild(api: Backend, req: ApiRequest, server_id: str, body: Any) -> webob.Response:
    validation.body(schema.rebuild_schema(req.version), body)
    asked = body["rebuild"]
    server = _server(api, req, server_id, policy.SERVERS % "rebuild")
    if asked.get("trusted_image_certificates"):
        api.policy.authorize(req.context, policy.SERVERS % "rebuild:trusted_certs",
                             {"project_id": server.project_id})
        raise bad_request("Image signature certificate validation is not supported")
    check_state(server, "rebuild", {"active", "stopped", "error"})
    image = server_handlers.image_of(api, asked["imageRef"], server.project_id,
                                     (server.record or {}).get("resources") or {},
                                     not_found="Cannot find image for rebuild")
    changes: dict[str, Any] = {"image": {"id": image.id, "url": image.url}}
    for field, key in (("name", "name"), ("metadata", "metadata"),
                       ("description", "description"), ("accessIPv4", "access_ipv4"),
                       ("accessIPv6", "access_ipv6")):
        if field in asked:
            changes[key] = asked[field]
    if "name" in changes:
        changes["name"] = changes["name"].strip()
    guest: dict[str, Any] = {}
    if req.version.at_least("2.54") and "key_name" in asked:
        guest["ssh_key"], changes["key_name"] = _key(api, req, asked["key_name"])
    if req.version.at_least("2.57") and "user_data" in asked:
        guest["user_data"], changes["user_data"] = server_handlers.user_data_of(asked)
    metadata = changes.get("metadata") or {}
    allowed_items = api.quotas.limits(server.project_id)["metadata_items"]
    if 0 <= allowed_items < len(metadata):
        raise Fault(403, f"Quota exceeded for metadata_items: Requested {len(metadata)}, but "
                         f"already used 0 of {allowed_items} metadata_items")
    _asked(lambda: api.actions.rebuild(server, image, changes, guest, caller(req)))
    server = server_handlers.lookup(api, req, server_id)
    shown = server_handlers.render(api, req, server)
    if not req.version.at_least("2.75"):
        shown = server_handlers.before_275(shown, keep_key_name=req.version.at_least("2.54"))
    if req.version.at_least("2.57"):
        shown["user_data"] = server.doc.get("user_data")
    response = json_response({"server": shown}, 202)
    response.headers["Location"] = view.links(req, "servers", server.uuid)[0]["href"]
    return response


def _key(api: Backend, req: ApiRequest, name: str | None) -> tuple[str | None, str | None]:
    """(public key, key name) a rebuild gives the guest; (None, None) removes it."""
    if name is None:
        return None, None
    key = api.keypairs.get(req.context.user_id, name)
    if key is None:
        raise bad_request("Invalid key_name provided.")
    return key.public_key, key.name


# --- resize --------------------------------------------------------------------------------


def resize(api: Backend, req: ApiRequest, server_id: str, body: Any) -> webob.Response:
    validation.body(schema.resize, body)
    server = _server(api, req, server_id, policy.SERVERS % "resize")
    check_state(server, "resize", {"active", "stopped"})
    flavor_id = str(body["resize"]["flavorRef"]).rstrip("/").rsplit("/", 1)[-1]
    flavor = api.flavors.get(flavor_id)
    if flavor is None or (not flavor.is_public and not req.context.is_admin):
        raise bad_request(f"Flavor {flavor_id[:100]} could not be found.")
    _asked(lambda: api.actions.resize(server, flavor, caller(req)))
    return empty_response(202)


def confirm_resize(api: Backend, req: ApiRequest, server_id: str, body: Any
                   ) -> webob.Response:
    validation.body(schema.confirm_resize, body)
    server = _server(api, req, server_id, policy.SERVERS % "confirm_resize")
    check_state(server, "confirmResize", {"resized"})
    _asked(lambda: api.actions.confirm_resize(server, caller(req)))
    return empty_response(204)


def revert_resize(api: Backend, req: ApiRequest, server_id: str, body: Any
                  ) -> webob.Response:
    validation.body(schema.revert_resize, body)
    server = _server(api, req, server_id, policy.SERVERS % "revert_resize")
    check_state(server, "revertResize", {"resized"})
    _asked(lambda: api.actions.revert_resize(server, caller(req)))
    return empty_response(202)


# --- live migration ------------------------------------------------------------------------


def migrate_live(api: Backend, req: ApiRequest, server_id: str, body: Any) -> webob.Response:
    """Nova's os-migrateLive (admins): to the host named, or where the scheduler puts it.
    Our disks are local, so every live migration copies them (block_migration true or
    "auto"); false, which needs shared storage, is refused as Nova's check refuses it
    there. force and disk_over_commit change nothing: the host named is checked as the
    scheduler would. Refusals come back at once (400, 409), not after the 202 as Nova's
    asynchronous checks from 2.34; a move that fails later leaves the server where it was,
    its reason in its instance action."""
    validation.body(schema.migrate_live_schema(req.version), body)
    asked = body["os-migrateLive"]
    server = _server(api, req, server_id, policy.MIGRATE_SERVER % "migrate_live")
    check_state(server, "os-migrateLive", {"active", "paused"})
    block = asked["block_migration"]
    if block != "auto" and not types.is_true(block):
        raise bad_request(f"{server.uuid} is not on shared storage: Shared storage live-"
                          "migration requires either shared storage or boot-from-volume "
                          "with no local disks.")
    host = asked.get("host")
    try:
        _asked(lambda: api.actions.migrate_live(server, host, caller(req)))
    except NotFound as exc:
        if host is None or str(exc).startswith("no instance"):
            raise Fault(404, f"Instance {server.uuid} could not be found.") from None
        raise bad_request(f"Compute host {host} could not be found.") from None
    except NoValidHost as exc:
        raise bad_request(f"No valid host was found. {'; '.join(exc.reasons)}".strip()
                          ) from None
    return empty_response(202)


# --- createImage ---------------------------------------------------------------------------


def create_image(api: Backend, req: ApiRequest, server_id: str, body: Any) -> webob.Response:
    """A snapshot into Glance (`schedule.py snapshot`'s path): 202 with the image's id
    from 2.45, its URL in Location before."""
    validation.body(schema.create_image, body)
    server = _server(api, req, server_id, policy.SERVERS % "create_image")
    check_state(server, "createImage", {"active", "stopped", "paused", "suspended"})
    asked = body["createImage"]
    metadata = dict(asked.get("metadata") or {})
    allowed_items = api.quotas.limits(server.project_id)["metadata_items"]
    if 0 <= allowed_items < len(metadata):
        raise Fault(403, f"Quota exceeded for metadata_items: Requested {len(metadata)}, but "
                         f"already used 0 of {allowed_items} metadata_items")
    image_id = _asked(lambda: api.actions.create_image(server, asked["name"].strip(), metadata,
                                                       caller(req)))
    if req.version.at_least("2.45"):
        return json_response({"image_id": image_id}, 202)
    response = empty_response(202)
    response.headers["Location"] = api.images.url_of(image_id)
    return response


# --- console -------------------------------------------------------------------------------


def console_output(api: Backend, req: ApiRequest, server_id: str, body: Any
                   ) -> webob.Response:
    validation.body(schema.console_output, body)
    server = _server(api, req, server_id, policy.CONSOLE_OUTPUT)
    length = body["os-getConsoleOutput"].get("length")
    # -1 (or any negative a string may carry past the schema's minimum): all of it.
    length = None if length is None or int(length) < 0 else int(length)
    text = api.actions.console_output(server)
    if text is None:
        if view.nova_states(server)[0] == "building" or server.record is None:
            raise Fault(409, f"Instance {server.uuid} is not ready")
        text = ""  # running, its host has not published the console yet
    if length is not None:
        # Nova's tail (its compute manager's _tail_log): the last `length` of the text's
        # '\n'-separated pieces, the empty one after a final newline counted.
        text = "\n".join(text.split("\n")[-length:]) if length else ""
    return json_response({"output": _CONSOLE_NOISE.sub("", text)})


ACTIONS: dict[str, Action] = {
    "os-start": start, "os-stop": stop, "reboot": reboot, "rebuild": rebuild,
    "resize": resize, "confirmResize": confirm_resize, "revertResize": revert_resize,
    "os-getConsoleOutput": console_output, "createImage": create_image,
    "os-migrateLive": migrate_live,
    "addSecurityGroup": security_groups.add, "removeSecurityGroup": security_groups.remove,
}

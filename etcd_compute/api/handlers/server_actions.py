"""POST /servers/{id}/action: os-start, os-stop, suspend, resume, pause, unpause, reboot,
rebuild, resize, confirmResize, revertResize, createImage, createBackup, os-getConsoleOutput,
os-migrateLive, migrate (Nova's servers, suspend-server, pause-server, create-backup,
console-output and migrate-server controllers); the actions that change only the API's
view are `server_admin_actions.py`'s.

As Nova: the body names one action (an unknown one is 400 "There is no such action"),
its schema is checked first (400), then the server (404 for another project's), the
rule (403), and the server's vm_state and task_state as Nova's compute API checks them
(409 "Cannot 'resize' instance ... while it is in vm_state stopped"); the request then
goes to the server's host through the operator's one path (`ops/lifecycle.py`), which
may still refuse what the host cannot do here (409, its reason).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

import webob

from etcd_compute.api import policy, validation
from etcd_compute.api.backend import Backend
from etcd_compute.api.handlers import action_checks as checks
from etcd_compute.api.handlers import remote_consoles, security_groups, server_admin_actions
from etcd_compute.api.handlers import servers as server_handlers
from etcd_compute.api.objects.servers import Server
from etcd_compute.api.schemas import parameter_types as types
from etcd_compute.api.schemas import server_actions as schema
from etcd_compute.api.schemas import server_admin_actions as admin_schema
from etcd_compute.api.views import servers as view
from etcd_compute.api.wsgi import (
    ApiRequest,
    Fault,
    Router,
    bad_request,
    empty_response,
    json_response,
)
from etcd_compute.errors import NotFound, NoValidHost

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


# --- power ---------------------------------------------------------------------------------


def start(api: Backend, req: ApiRequest, server_id: str, body: Any) -> webob.Response:
    validation.body(schema.start, body)
    server = checks.server_for(api, req, server_id, policy.SERVERS % "start")
    checks.check_state(server, "start", {"stopped"})
    checks.asked(lambda: api.actions.start(server, checks.caller(req)))
    return empty_response(202)


def stop(api: Backend, req: ApiRequest, server_id: str, body: Any) -> webob.Response:
    validation.body(schema.stop, body)
    server = checks.server_for(api, req, server_id, policy.SERVERS % "stop")
    checks.check_state(server, "stop", {"active", "error"})
    checks.asked(lambda: api.actions.stop(server, checks.caller(req)))
    return empty_response(202)


def suspend(api: Backend, req: ApiRequest, server_id: str, body: Any) -> webob.Response:
    validation.body(schema.suspend, body)
    server = checks.server_for(api, req, server_id, policy.SUSPEND_SERVER % "suspend")
    checks.check_state(server, "suspend", {"active"})
    checks.asked(lambda: api.actions.suspend(server, checks.caller(req)))
    return empty_response(202)


def resume(api: Backend, req: ApiRequest, server_id: str, body: Any) -> webob.Response:
    validation.body(schema.resume, body)
    server = checks.server_for(api, req, server_id, policy.SUSPEND_SERVER % "resume")
    checks.check_state(server, "resume", {"suspended"})
    checks.asked(lambda: api.actions.resume(server, checks.caller(req)))
    return empty_response(202)


def pause(api: Backend, req: ApiRequest, server_id: str, body: Any) -> webob.Response:
    validation.body(schema.pause, body)
    server = checks.server_for(api, req, server_id, policy.PAUSE_SERVER % "pause")
    checks.check_state(server, "pause", {"active"})
    checks.asked(lambda: api.actions.pause(server, checks.caller(req)))
    return empty_response(202)


def unpause(api: Backend, req: ApiRequest, server_id: str, body: Any) -> webob.Response:
    validation.body(schema.unpause, body)
    server = checks.server_for(api, req, server_id, policy.PAUSE_SERVER % "unpause")
    checks.check_state(server, "unpause", {"paused"})
    checks.asked(lambda: api.actions.unpause(server, checks.caller(req)))
    return empty_response(202)


def reboot(api: Backend, req: ApiRequest, server_id: str, body: Any) -> webob.Response:
    validation.body(schema.reboot, body)
    hard = body["reboot"]["type"].upper() == "HARD"
    server = checks.server_for(api, req, server_id, policy.SERVERS % "reboot")
    if hard:
        checks.check_state(server, "reboot",
                           {"active", "stopped", "paused", "suspended", "error"}, ALLOW_REBOOT)
    else:
        checks.check_state(server, "reboot", {"active"})
    checks.asked(lambda: api.actions.reboot(server, hard, checks.caller(req)))
    return empty_response(202)


# --- rebuild -------------------------------------------------------------------------------


def rebuild(api: Backend, req: ApiRequest, server_id: str, body: Any) -> webob.Response:
    validation.body(schema.rebuild_schema(req.version), body)
    asked = body["rebuild"]
    server = checks.server_for(api, req, server_id, policy.SERVERS % "rebuild")
    if asked.get("trusted_image_certificates"):
        api.policy.authorize(req.context, policy.SERVERS % "rebuild:trusted_certs",
                             {"project_id": server.project_id})
        raise bad_request("Image signature certificate validation is not supported")
    checks.check_state(server, "rebuild", {"active", "stopped", "error"})
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
    _check_metadata_quota(api, server, changes.get("metadata") or {})
    checks.asked(lambda: api.actions.rebuild(server, image, changes, guest,
                                             checks.caller(req)))
    server = server_handlers.lookup(api, req, server_id)
    shown = server_handlers.render(api, req, server)
    if not req.version.at_least("2.75"):
        shown = server_handlers.before_275(shown, keep_key_name=req.version.at_least("2.54"))
    # The user data is `user_data` here, not the admin's extended attribute (Nova's
    # rebuild view, show_user_data=False).
    shown.pop("OS-EXT-SRV-ATTR:user_data", None)
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
    server = checks.server_for(api, req, server_id, policy.SERVERS % "resize")
    checks.check_state(server, "resize", {"active", "stopped"})
    flavor_id = str(body["resize"]["flavorRef"]).rstrip("/").rsplit("/", 1)[-1]
    flavor = api.flavors.get(flavor_id)
    if flavor is None or (not flavor.is_public and not req.context.is_admin):
        raise bad_request(f"Flavor {flavor_id[:100]} could not be found.")
    checks.asked(lambda: api.actions.resize(server, flavor, checks.caller(req)))
    return empty_response(202)


def confirm_resize(api: Backend, req: ApiRequest, server_id: str, body: Any
                   ) -> webob.Response:
    validation.body(schema.confirm_resize, body)
    server = checks.server_for(api, req, server_id, policy.SERVERS % "confirm_resize")
    checks.check_state(server, "confirmResize", {"resized"})
    if api.actions.awaits_move_confirm(server):  # a cold migrate's (Nova's too)
        checks.asked(lambda: api.actions.confirm_move(server, checks.caller(req)))
        return empty_response(204)
    checks.asked(lambda: api.actions.confirm_resize(server, checks.caller(req)))
    return empty_response(204)


def revert_resize(api: Backend, req: ApiRequest, server_id: str, body: Any
                  ) -> webob.Response:
    validation.body(schema.revert_resize, body)
    server = checks.server_for(api, req, server_id, policy.SERVERS % "revert_resize")
    checks.check_state(server, "revertResize", {"resized"})
    if api.actions.awaits_move_confirm(server):
        checks.asked(lambda: api.actions.revert_move(server, checks.caller(req)))
        return empty_response(202)
    checks.asked(lambda: api.actions.revert_resize(server, checks.caller(req)))
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
    server = checks.server_for(api, req, server_id, policy.MIGRATE_SERVER % "migrate_live")
    checks.check_state(server, "os-migrateLive", {"active", "paused"})
    block = asked["block_migration"]
    if block != "auto" and not types.is_true(block):
        raise bad_request(f"{server.uuid} is not on shared storage: Shared storage live-"
                          "migration requires either shared storage or boot-from-volume "
                          "with no local disks.")
    _move(api, req, server, asked.get("host"), live=True)
    return empty_response(202)


def migrate(api: Backend, req: ApiRequest, server_id: str, body: Any) -> webob.Response:
    """Nova's migrate (admins; a host from 2.56): `schedule.py migrate --verify`'s cold
    move, to the host named or where the scheduler puts it. As Nova's, it waits in
    VERIFY_RESIZE once defined at the destination (the source keeping its stopped copy and
    its claim) for confirmResize or revertResize (docs/reference/compute-api.md)."""
    validation.body(schema.migrate_schema(req.version), body)
    asked = body["migrate"] if isinstance(body["migrate"], dict) else {}
    server = checks.server_for(api, req, server_id, policy.MIGRATE_SERVER % "migrate")
    checks.check_state(server, "migrate", {"active", "stopped"})
    _move(api, req, server, asked.get("host") if req.version.at_least("2.56") else None,
          live=False)
    return empty_response(202)


def _move(api: Backend, req: ApiRequest, server: Server, host: str | None,
          live: bool) -> None:
    try:
        checks.asked(lambda: api.actions.move(server, host, checks.caller(req),
                                              live=live))
    except NotFound as exc:
        if host is None or str(exc).startswith("no instance"):
            raise Fault(404, f"Instance {server.uuid} could not be found.") from None
        raise bad_request(f"Compute host {host} could not be found.") from None
    except NoValidHost as exc:
        raise bad_request(f"No valid host was found. {'; '.join(exc.reasons)}".strip()
                          ) from None


# --- createImage ---------------------------------------------------------------------------


def create_image(api: Backend, req: ApiRequest, server_id: str, body: Any) -> webob.Response:
    """A snapshot into Glance (`schedule.py snapshot`'s path): 202 with the image's id
    from 2.45, its URL in Location before."""
    validation.body(schema.create_image, body)
    server = checks.server_for(api, req, server_id, policy.SERVERS % "create_image",
                               locked_ok=True)
    checks.check_state(server, "createImage", {"active", "stopped", "paused", "suspended"})
    asked = body["createImage"]
    metadata = dict(asked.get("metadata") or {})
    _check_metadata_quota(api, server, metadata)
    image_id = checks.asked(lambda: api.actions.create_image(
        server, asked["name"].strip(), metadata, checks.caller(req)))
    if req.version.at_least("2.45"):
        return json_response({"image_id": image_id}, 202)
    response = empty_response(202)
    response.headers["Location"] = api.images.url_of(image_id)
    return response


def create_backup(api: Backend, req: ApiRequest, server_id: str, body: Any
                  ) -> webob.Response:
    """createImage's snapshot as a backup (`image_type` backup, its `backup_type`); once
    uploaded, the host deletes the server's backups of that type beyond the newest
    `rotation` (Nova's rotation, 0 included). 202 with the image's id from 2.45, before
    its URL in Location when rotation is above 0 (Nova's)."""
    validation.body(admin_schema.create_backup, body)
    server = checks.server_for(api, req, server_id, policy.CREATE_BACKUP, locked_ok=True)
    checks.check_state(server, "createBackup", {"active", "stopped", "paused", "suspended"})
    asked = body["createBackup"]
    metadata = dict(asked.get("metadata") or {})
    _check_metadata_quota(api, server, metadata)
    rotation = {"backup_type": asked["backup_type"], "keep": int(asked["rotation"])}
    image_id = checks.asked(lambda: api.actions.create_image(
        server, asked["name"].strip(), metadata, checks.caller(req), rotation=rotation))
    if req.version.at_least("2.45"):
        return json_response({"image_id": image_id}, 202)
    response = empty_response(202)
    if rotation["keep"] > 0:
        response.headers["Location"] = api.images.url_of(image_id)
    return response


def _check_metadata_quota(api: Backend, server: Server, metadata: dict[str, Any]) -> None:
    allowed_items = api.quotas.limits(server.project_id)["metadata_items"]
    if 0 <= allowed_items < len(metadata):
        raise Fault(403, f"Quota exceeded for metadata_items: Requested {len(metadata)}, but "
                         f"already used 0 of {allowed_items} metadata_items")


# --- console -------------------------------------------------------------------------------


def console_output(api: Backend, req: ApiRequest, server_id: str, body: Any
                   ) -> webob.Response:
    validation.body(schema.console_output, body)
    server = checks.server_for(api, req, server_id, policy.CONSOLE_OUTPUT, locked_ok=True)
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
    **server_admin_actions.ACTIONS,
    **remote_consoles.ACTIONS,
    "os-start": start, "os-stop": stop, "suspend": suspend, "resume": resume,
    "pause": pause, "unpause": unpause,
    "reboot": reboot, "rebuild": rebuild,
    "resize": resize, "confirmResize": confirm_resize, "revertResize": revert_resize,
    "os-getConsoleOutput": console_output, "createImage": create_image,
    "createBackup": create_backup,
    "os-migrateLive": migrate_live, "migrate": migrate,
    "addSecurityGroup": security_groups.add, "removeSecurityGroup": security_groups.remove,
}

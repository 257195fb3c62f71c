"""A server as Nova shows it at a microversion, from our instance states.

Our states map to Nova's vm_state, task_state and power_state, and those to Nova's
`status` as Nova's `_STATE_MAP` does:

    SCHEDULED, RESCHEDULING  building / scheduling           BUILD
    BUILDING                 building / spawning             BUILD
    ACTIVE                   active / -        running       ACTIVE
    SHUTOFF                  stopped / -       shutdown      SHUTOFF
    STOPPING                 active / powering-off           ACTIVE
    STARTING                 stopped / powering-on           SHUTOFF
    SUSPENDED                suspended / -     shutdown      SUSPENDED
    SUSPENDING               active / suspending             ACTIVE
    RESUMING                 suspended / resuming            SUSPENDED
    PAUSED                   paused / -        paused        PAUSED
    PAUSING                  active / pausing                ACTIVE
    UNPAUSING                paused / unpausing              PAUSED
    REBOOTING                active / rebooting[_hard]       REBOOT, HARD_REBOOT
      from PAUSED            paused / rebooting_hard         PAUSED
    REBUILDING               (as it was) / rebuilding        REBUILD
    RESIZING                 (as it was) / resize_migrating  RESIZE
    SNAPSHOTTING             (as it was) / image_uploading   (as it was)
    FILTERING                (as it was) / -                 (as it was)
    PLUGGING                 (as it was) / -                 (as it was)
    MIGRATING, MIGRATED      live: active / migrating        MIGRATING
      (INCOMING)             cold: (as it was) / resize_migrating  RESIZE
      reverting a resize     resized / resize_reverting      REVERT_RESIZE
      (or a cold migrate: SHUTOFF until its destination discarded, then STARTING)
    ACTIVE, SHUTOFF holding
      a resize's old size    resized / -                     VERIFY_RESIZE
    MIGRATED, a cold migrate
      awaiting its confirm   resized / -                     VERIFY_RESIZE
    DELETING                 active / deleting               ACTIVE
    ERROR                    error / -                       ERROR (with its fault)

An admin's os-resetState (the view's `reset`) shows its vm_state (active or error, no
task_state) until the instance moves on (docs/reference/compute-api.md).

An action asked through the API that its host has not taken up yet (the view's `task`)
shows as Nova's task_state at once: powering-off, powering-on, rebooting[_hard],
rebuilding, resize_prep, resize_reverting, suspending, resuming, pausing, unpausing (as
Nova sets it before casting to the host).
"""

from __future__ import annotations

import datetime
import hashlib
import ipaddress
from typing import Any

from etcd_compute.api.microversion import Version
from etcd_compute.api.objects.servers import Server
from etcd_compute.api.wsgi import ApiRequest
from etcd_compute.instances import states

NOSTATE, RUNNING, PAUSED, SHUTDOWN = 0, 1, 3, 4
_STATUS = {
    ("active", None): "ACTIVE", ("active", "rebooting"): "REBOOT",
    ("active", "rebooting_hard"): "HARD_REBOOT", ("active", "rebuilding"): "REBUILD",
    ("active", "resize_prep"): "RESIZE", ("active", "resize_migrating"): "RESIZE",
    ("active", "migrating"): "MIGRATING",
    ("building", None): "BUILD", ("stopped", None): "SHUTOFF",
    ("stopped", "resize_prep"): "RESIZE", ("stopped", "resize_migrating"): "RESIZE",
    ("stopped", "rebuilding"): "REBUILD", ("error", None): "ERROR",
    ("error", "rebuilding"): "REBUILD", ("deleted", None): "DELETED",
    ("suspended", None): "SUSPENDED", ("paused", None): "PAUSED",
    ("resized", None): "VERIFY_RESIZE",
    ("resized", "resize_reverting"): "REVERT_RESIZE",
}
# Nova's statuses (the `status` filter accepts these).
STATUSES = ("ACTIVE", "BUILD", "DELETED", "ERROR", "HARD_REBOOT", "MIGRATING", "PASSWORD",
            "PAUSED", "REBOOT", "REBUILD", "RESCUE", "RESIZE", "REVERT_RESIZE", "SHELVED",
            "SHELVED_OFFLOADED", "SHUTOFF", "SOFT_DELETED", "SUSPENDED", "UNKNOWN",
            "VERIFY_RESIZE")
# Only shown while in these statuses (Nova's _progress_statuses).
_PROGRESS = ("ACTIVE", "BUILD", "REBUILD", "RESIZE", "VERIFY_RESIZE", "MIGRATING")


# Our states an action starts from (an action asked shows on them at once).
RESTING = (states.ACTIVE, states.SHUTOFF, states.SUSPENDED, states.PAUSED)
# The task_state of an action asked and not taken up yet.
_PENDING = {"stop": "powering-off", "start": "powering-on", "suspend": "suspending",
            "resume": "resuming", "pause": "pausing", "unpause": "unpausing",
            "reboot": "rebooting",
            "rebuild": "rebuilding", "resize": "resize_prep",
            "revert-resize": "resize_reverting", "snapshot": "image_snapshot",
            # Moves (os-migrateLive, migrate): Nova's API sets them before its 202.
            "live-migrate": "migrating", "migrate": "resize_prep"}


def pending(server: Server) -> dict[str, Any] | None:
    """The action asked through the API that the host has not taken up yet: the record
    names another request and has not changed since it was asked (a request taken up,
    refused or overtaken by another moves the record)."""
    task, record = server.doc.get("task"), server.record
    if not task or record is None or record["state"] not in RESTING:
        return None
    if record.get("request_id") == task["request_id"] or \
            float(record.get("updated_at") or 0) > float(task["at"]):
        return None
    return dict(task)


def reset_state(server: Server) -> str | None:
    """The vm_state an admin set with os-resetState, while the instance is as it was then
    (same state, same last request): Nova's reset only rewrites its database, so what
    the host does next (an action taken up, a power change) shows again."""
    reset, record = server.doc.get("reset"), server.record
    if not reset or record is None:
        return None
    if record["state"] != reset["state"] or record.get("request_id") != reset.get("request_id"):
        return None
    return str(reset["vm_state"])


# Actions Nova runs with no task_state (its security groups, its interface hot-plug).
_NO_TASK_STATE = (states.SECURITY_GROUPS, states.ATTACH_INTERFACE, states.DETACH_INTERFACE)


def _reverting_move(server: Server, task: dict[str, Any]) -> bool:
    """The host starting the source's copy of a reverted cold move, the revert asked
    through the API: the start goes by the revert's request (controller/migrations.py),
    and Nova shows resize_reverting until its source runs again."""
    asked = server.doc.get("task") or {}
    return asked.get("action") == "revert-resize" and \
        asked.get("request_id") == task.get("id")


def nova_states(server: Server) -> tuple[str, str | None, int]:
    """(vm_state, task_state, power_state) of our state."""
    state = server.state
    reset = reset_state(server) if pending(server) is None else None
    if reset is not None and not server.doc.get("deleting"):
        power = {states.ACTIVE: RUNNING, states.SHUTOFF: SHUTDOWN,
                 states.SUSPENDED: SHUTDOWN, states.PAUSED: PAUSED}.get(state, NOSTATE)
        return reset, None, power
    if server.doc.get("deleting") and state not in (states.ERROR, states.DELETED):
        state = states.DELETING  # asked; the host has not taken it up yet
    record = server.record or {}
    task = record.get("task") or {}
    held = bool(record.get("resize_hold"))
    if state in RESTING:
        vm_state = "resized" if held else {states.ACTIVE: "active", states.SHUTOFF: "stopped",
                                           states.SUSPENDED: "suspended",
                                           states.PAUSED: "paused"}[state]
        power = {states.ACTIVE: RUNNING, states.PAUSED: PAUSED}.get(state, SHUTDOWN)
        asked = pending(server)
        if asked is None:
            return vm_state, None, power
        if asked["action"] in _NO_TASK_STATE:
            return vm_state, None, power  # Nova sets no task_state for them
        task_state = _PENDING[asked["action"]]
        if asked["action"] == "reboot" and asked.get("hard"):
            task_state = "rebooting_hard"
        if asked["action"] == "revert-resize":
            vm_state = "resized"  # Nova's REVERT_RESIZE until the revert is done
        return vm_state, task_state, power
    if state == states.RESIZING and task.get("reverts"):
        return "resized", "resize_reverting", RUNNING if task.get("from") == states.ACTIVE \
            else SHUTDOWN
    if state == states.STARTING and _reverting_move(server, task):
        return "resized", "resize_reverting", SHUTDOWN
    was = {states.SHUTOFF: "stopped", states.SUSPENDED: "suspended",
           states.PAUSED: "paused"}.get(str(task.get("from")), "active")
    was_power = {"active": RUNNING, "paused": PAUSED}.get(was, SHUTDOWN)
    if state == states.MIGRATED and task.get("finished") and not task.get("live"):
        # A cold migrate defined at its destination, awaiting its confirm or revert
        # (ops/migrations.py): Nova's VERIFY_RESIZE.
        return "resized", None, was_power
    if state in (states.MIGRATING, states.MIGRATED, states.INCOMING):
        # A move to another host (ops/migrations.py): Nova's live migration, or its cold
        # migrate (a resize to another host).
        return ("active", "migrating", RUNNING) if task.get("live") else \
            (was, "resize_migrating", was_power)
    return {
        states.SCHEDULED: ("building", "scheduling", NOSTATE),
        states.RESCHEDULING: ("building", "scheduling", NOSTATE),
        states.BUILDING: ("building", "spawning", NOSTATE),
        states.ACTIVE: ("active", None, RUNNING),
        states.SHUTOFF: ("stopped", None, SHUTDOWN),
        states.STOPPING: ("active", "powering-off", RUNNING),
        states.STARTING: ("stopped", "powering-on", SHUTDOWN),
        # A suspended guest is shut off, its memory kept (Nova's libvirt: power_state 4).
        states.SUSPENDED: ("suspended", None, SHUTDOWN),
        states.SUSPENDING: ("active", "suspending", RUNNING),
        states.RESUMING: ("suspended", "resuming", SHUTDOWN),
        # A paused guest: its vCPUs stopped, its memory in the host's RAM (Nova's libvirt:
        # power_state 3).
        states.PAUSED: ("paused", None, PAUSED),
        states.PAUSING: ("active", "pausing", RUNNING),
        states.UNPAUSING: ("paused", "unpausing", PAUSED),
        # Nova keeps a paused server's vm_state until its (hard) reboot is done.
        states.REBOOTING: ("paused", "rebooting_hard", PAUSED) if was == "paused" else
                          ("active", "rebooting_hard" if task.get("hard") else "rebooting",
                           RUNNING),
        states.REBUILDING: (was, "rebuilding", was_power),
        states.RESIZING: (was, "resize_migrating", was_power),
        states.SNAPSHOTTING: (was, "image_uploading", was_power),
        states.FILTERING: (was, None, was_power),
        states.PLUGGING: (was, None, was_power),
        states.DELETING: ("active", "deleting", NOSTATE),
        states.ERROR: ("error", None, NOSTATE),
        states.DELETED: ("deleted", None, NOSTATE),
    }.get(state, ("error", None, NOSTATE))


def security_groups(server: Server) -> list[str]:
    """The server's security groups as Nova's view lists them: those asked of its host
    while the request is pending or running, else those its record says the host applied;
    none without an instance (a create that failed before any claim)."""
    if server.record is None:
        return []
    asked = pending(server)
    if asked is not None and asked["action"] == states.SECURITY_GROUPS:
        return list(asked["security_groups"])
    task = server.record.get("task") or {}
    if server.record["state"] == states.FILTERING and "security_groups" in task:
        return list(task["security_groups"])
    return states.security_groups(server.record)


def status(server: Server) -> str:
    vm_state, task_state, _ = nova_states(server)
    return _STATUS.get((vm_state, task_state)) or _STATUS.get((vm_state, None), "UNKNOWN")


def isotime(timestamp: float | None) -> str | None:
    """Nova's `utils.isotime`: UTC, seconds, a Z."""
    if timestamp is None:
        return None
    when = datetime.datetime.fromtimestamp(timestamp, datetime.UTC)
    return when.strftime("%Y-%m-%dT%H:%M:%SZ")


def links(req: ApiRequest, collection: str, item: str) -> list[dict[str, str]]:
    """self (versioned) and bookmark links, with the project id when the request URL had
    one (as Nova's)."""
    project = req.environ.get("etcd_compute.url_project_id")
    parts = [project, collection, item] if project else [collection, item]
    return [{"rel": "self", "href": req.url_for("v2.1", *parts)},
            {"rel": "bookmark", "href": req.url_for(*parts)}]


def basic(req: ApiRequest, server: Server) -> dict[str, Any]:
    return {"id": server.uuid, "name": server.doc["name"],
            "links": links(req, "servers", server.uuid)}


def _host_id(server: Server) -> str:
    host = server.host or ""
    if not host:
        return ""
    return hashlib.sha224((server.project_id + host).encode()).hexdigest()


def flavor_of(server: Server) -> dict[str, Any]:
    """The server's flavor: a resize's new one once the instance has its size (resized,
    whoever confirms it: the API or `schedule.py`), else the one it had (a resize not done
    yet, failed or reverted)."""
    resize = server.doc.get("resize") or {}
    if resize and (server.record or {}).get("resources") == resize.get("resources"):
        return dict(resize["new_flavor"])
    return dict(server.doc.get("flavor") or {})


def _flavor(req: ApiRequest, server: Server, show_extra_specs: bool) -> dict[str, Any]:
    flavor = flavor_of(server)
    if not req.version.at_least("2.47"):
        return {"id": flavor.get("id", ""), "links": [
            {"rel": "bookmark", "href": req.url_for("flavors", flavor.get("id", ""))}]}
    shown = {"original_name": flavor.get("name", ""), "vcpus": flavor.get("vcpus", 0),
             "ram": flavor.get("ram", 0), "disk": flavor.get("disk", 0),
             "ephemeral": flavor.get("ephemeral", 0), "swap": flavor.get("swap", 0)}
    if show_extra_specs:
        shown["extra_specs"] = dict(flavor.get("extra_specs") or {})
    return shown


def _image(req: ApiRequest, server: Server) -> dict[str, Any] | str:
    image = server.doc.get("image")
    if not image:
        return ""
    return {"id": image["id"],
            "links": [{"rel": "bookmark", "href": req.url_for("images", image["id"])}]}


def _addresses(server: Server, network: str) -> dict[str, list[dict[str, Any]]]:
    """The instance's address on our network (hidden while it builds, as Nova's)."""
    record = server.record or {}
    ip = record.get("ip")
    if not ip or nova_states(server)[0] == "building":
        return {}
    return {network: [{"version": 6 if ":" in ip else 4, "addr": ip,
                       "OS-EXT-IPS:type": "fixed"}]}


def _access_ip(address: str | None) -> str:
    """An access address in its canonical form, as Nova's database column gives it back
    (`0000:...:babe:220.12.22.2` is `::babe:dc0c:1602`); the schema admitted only IPs."""
    if not address:
        return ""
    try:
        return str(ipaddress.ip_address(address))
    except ValueError:
        return address


def ips(server: Server, network: str) -> dict[str, list[dict[str, Any]]]:
    """The server's addresses as /servers/{id}/ips lists them (version and addr)."""
    return {label: [{"version": a["version"], "addr": a["addr"]} for a in found]
            for label, found in _addresses(server, network).items()}


def fault(server: Server, is_admin: bool) -> dict[str, Any] | None:
    """Nova's fault of an ERROR server: the failure's first line; details for admins."""
    found = server.doc.get("fault")
    if found:
        shown = {"code": found["code"], "created": isotime(found["created"]),
                 "message": found["message"]}
        if found.get("details") and (is_admin or found["code"] != 500):
            shown["details"] = found["details"]
        return shown
    error = (server.record or {}).get("error")
    if not error:
        return None
    shown = {"code": 500, "created": isotime((server.record or {}).get("updated_at")),
             "message": error[:255]}
    if is_admin:
        shown["details"] = error
    return shown


def _usage_time(timestamp: float | None) -> str | None:
    """Nova's OS-SRV-USG times: UTC, microseconds, no zone."""
    if timestamp is None:
        return None
    when = datetime.datetime.fromtimestamp(timestamp, datetime.UTC)
    return when.strftime("%Y-%m-%dT%H:%M:%S.%f")


def show(req: ApiRequest, server: Server, *, network: str, show_extended: bool,
         show_extra_specs: bool, is_admin: bool,
         host_status: str | None = None, availability_zone: str = "",
         addresses: dict[str, list[dict[str, Any]]] | None = None,
         groups: list[str] | None = None) -> dict[str, Any]:
    """The detailed view (GET /servers/{id}, /servers/detail); `addresses` and `groups`:
    the neutron backend's (its ports'), else the address on `network` and the security
    groups its record has."""
    version: Version = req.version
    doc, record = server.doc, server.record or {}
    vm_state, task_state, power_state = nova_states(server)
    shown: dict[str, Any] = {
        "id": server.uuid, "name": doc["name"], "status": status(server),
        "tenant_id": server.project_id, "user_id": doc["user_id"],
        "metadata": dict(doc.get("metadata") or {}), "hostId": _host_id(server),
        "image": _image(req, server), "flavor": _flavor(req, server, show_extra_specs),
        "created": isotime(doc["created_at"]), "updated": isotime(server.updated_at),
        "addresses": _addresses(server, network) if addresses is None else addresses,
        "accessIPv4": _access_ip(doc.get("access_ipv4")),
        "accessIPv6": _access_ip(doc.get("access_ipv6")),
        "links": links(req, "servers", server.uuid), "OS-DCF:diskConfig": "MANUAL",
        "OS-EXT-AZ:availability_zone": availability_zone,
        "config_drive": "True", "key_name": doc.get("key_name"),
        "OS-SRV-USG:launched_at": _usage_time(record.get("launched_at")),
        "OS-SRV-USG:terminated_at": _usage_time(record.get("updated_at"))
        if record.get("state") == states.DELETED else None,
        "OS-EXT-STS:task_state": task_state, "OS-EXT-STS:vm_state": vm_state,
        "OS-EXT-STS:power_state": power_state,
        "os-extended-volumes:volumes_attached": [],
    }
    groups = security_groups(server) if groups is None else groups
    if groups:  # Nova leaves the key out for a server in none
        shown["security_groups"] = [{"name": name} for name in groups]
    if shown["status"] in ("ERROR", "DELETED"):
        found = fault(server, is_admin)
        if found:
            shown["fault"] = found
    if shown["status"] in _PROGRESS:
        shown["progress"] = 100 if shown["status"] == "ACTIVE" else 0
    if show_extended:
        host_name = record.get("host_name")
        if shown["status"] == "VERIFY_RESIZE" and record.get("state") == states.MIGRATED:
            # A cold migrate awaiting its confirm: on its destination, as Nova's shows it.
            host_name = (record.get("task") or {}).get("destination_name") or host_name
        shown["OS-EXT-SRV-ATTR:host"] = host_name
        shown["OS-EXT-SRV-ATTR:hypervisor_hostname"] = host_name
        shown["OS-EXT-SRV-ATTR:instance_name"] = server.uuid
        if version.at_least("2.3"):
            shown.update({
                "OS-EXT-SRV-ATTR:hostname": doc.get("hostname"),
                "OS-EXT-SRV-ATTR:kernel_id": "", "OS-EXT-SRV-ATTR:ramdisk_id": "",
                "OS-EXT-SRV-ATTR:launch_index": doc.get("launch_index", 0),
                "OS-EXT-SRV-ATTR:reservation_id": doc.get("reservation_id", ""),
                "OS-EXT-SRV-ATTR:root_device_name": "/dev/vda",
                "OS-EXT-SRV-ATTR:user_data": doc.get("user_data")})
    lock = doc.get("lock") or {}
    if version.at_least("2.9"):
        shown["locked"] = bool(lock)
    if version.at_least("2.16") and host_status is not None:
        shown["host_status"] = host_status
    if version.at_least("2.19"):
        shown["description"] = doc.get("description")
    if version.at_least("2.26"):
        shown["tags"] = list(doc.get("tags") or [])
    if version.at_least("2.63"):
        shown["trusted_image_certificates"] = None
    if version.at_least("2.73"):
        shown["locked_reason"] = lock.get("reason")
    return shown

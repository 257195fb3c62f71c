"""A server's actions as Nova's os-instance-actions shows them, from the instance's events.

Each of our events (`events.py`: what happened, who asked, where, when, how it ended) is
one Nova action with one event, named as Nova names them:

    ours                     Nova's action    its event
    create                   create           compute__do_build_and_run_instance
    destroy                  delete           compute_terminate_instance
    stop, power-off          stop             compute_stop_instance
    start, power-on          start            compute_start_instance
    reboot                   reboot           compute_reboot_instance
    rebuild                  rebuild          compute_rebuild_instance
    resize                   resize           compute_resize_instance
    confirm-resize           confirmResize    compute_confirm_resize
    revert-resize            revertResize     compute_revert_resize
    snapshot                 createImage      compute_snapshot_instance
    security-groups          security-groups (ours: Nova records none for its group actions)
    attach-interface         attach_interface compute_attach_interface
    detach-interface         detach_interface compute_detach_interface
    recover                  evacuate         compute_rebuild_instance
    evacuate (a drain)       migrate          compute_resize_instance
    migrate, live            live-migration   compute_live_migration
    migrate, cold            migrate          compute_prep_resize
    reschedule, build        reschedule, build (ours: no Nova action is like them)
    reject                   reject (ours)

power-off and power-on are the hypervisor's (the guest stopped or started outside us), as
Nova's power-state sync records a stop. An action's request id is `req-` and our request's
id (an operator's or the API's), or one derived from the event for those without one.
Who asked: the API's caller (api:USER@PROJECT) is the action's user and project; an
operator, the controller or the hypervisor are none (Nova's actions of its own).
"""

from __future__ import annotations

import hashlib
import uuid as uuidlib
from dataclasses import dataclass
from typing import Any

from etcd_compute import events
from etcd_compute.errors import NotFound
from etcd_compute.etcd import KeyValueStore
from etcd_compute.instances import records

NOVA = {"create": ("create", "compute__do_build_and_run_instance"),
        "destroy": ("delete", "compute_terminate_instance"),
        "stop": ("stop", "compute_stop_instance"),
        "power-off": ("stop", "compute_stop_instance"),
        "start": ("start", "compute_start_instance"),
        "power-on": ("start", "compute_start_instance"),
        "suspend": ("suspend", "compute_suspend_instance"),
        "resume": ("resume", "compute_resume_instance"),
        "pause": ("pause", "compute_pause_instance"),
        "unpause": ("unpause", "compute_unpause_instance"),
        "reboot": ("reboot", "compute_reboot_instance"),
        "rebuild": ("rebuild", "compute_rebuild_instance"),
        "resize": ("resize", "compute_resize_instance"),
        "confirm-resize": ("confirmResize", "compute_confirm_resize"),
        "revert-resize": ("revertResize", "compute_revert_resize"),
        "snapshot": ("createImage", "compute_snapshot_instance"),
        "attach-interface": ("attach_interface", "compute_attach_interface"),
        "detach-interface": ("detach_interface", "compute_detach_interface"),
        "recover": ("evacuate", "compute_rebuild_instance"),
        "evacuate": ("migrate", "compute_resize_instance")}
# Derived request ids: uuid5(this, "<instance>/<action>/<started_at>").
_DERIVED = uuidlib.UUID("0f3c1a57-1c4e-4d55-8a8e-7e4c2b8d9a10")


@dataclass
class Action:
    """One of Nova's instance actions (and its one event)."""

    action: str
    event: str
    request_id: str
    instance_uuid: str
    user_id: str | None
    project_id: str | None
    start_time: float
    finish_time: float | None
    updated_at: float
    result: str
    message: str | None
    traceback: str | None
    # Where it ran: the provider (what hostId hashes, as a server's) and its name.
    host: str | None
    host_name: str | None


def _owner(by: str | None) -> tuple[str | None, str | None]:
    """(user, project) of an API caller (api:USER@PROJECT); none for anyone else."""
    if not by or not by.startswith("api:") or "@" not in by:
        return None, None
    user, _, project = by[4:].partition("@")
    return user or None, project or None


def of_event(uuid: str, event: dict[str, Any]) -> Action:
    name = event["action"]
    action, event_name = NOVA.get(name, (name, name))
    if name == "migrate":  # a move asked (API or schedule.py migrate): live or cold
        action, event_name = ("live-migration", "compute_live_migration") if \
            event.get("live") else ("migrate", "compute_prep_resize")
    rid = event.get("request_id") or str(uuidlib.uuid5(
        _DERIVED, f"{uuid}/{name}/{event['started_at']!r}"))
    user, project = _owner(event.get("by"))
    failed = event["result"] in (events.ERROR, events.REFUSED)
    result = {events.SUCCESS: "Success", events.RUNNING: None}.get(event["result"], "Error")
    problem = event.get("error")
    if event["result"] == events.REFUSED:
        problem = f"refused: {problem}" if problem else "refused"
    return Action(action, event_name, f"req-{rid}", uuid, user, project,
                  float(event["started_at"]), event.get("ended_at"),
                  float(event.get("ended_at") or event["started_at"]), result or "",
                  "Error" if failed else None, problem, event.get("host"),
                  event.get("host_name"))


def actions_of(store: KeyValueStore, uuid: str, host: str | None) -> list[Action]:
    """The server's actions, newest first (Nova's order)."""
    if host is None:
        found, _read = records.find(store, uuid)
        if found is None:
            raise NotFound(f"Instance {uuid} could not be found.")
        host = found
    log = events.read(store, host, uuid)
    return sorted((of_event(uuid, e) for e in log), key=lambda a: a.start_time,
                  reverse=True)


def host_id(project_id: str, host: str | None) -> str:
    """Nova's obfuscated host id of an event's host (`utils.generate_hostid`)."""
    if not host:
        return ""
    return hashlib.sha224((project_id + host).encode()).hexdigest()

"""Our states as Nova's vm_state, task_state, power_state and status; fields per
microversion; faults with details for admins only."""

from __future__ import annotations

import pytest

from etcd_compute.api.microversion import Version
from etcd_compute.api.objects.servers import Server
from etcd_compute.api.views import servers as view
from etcd_compute.api.wsgi import ApiRequest
from etcd_compute.instances import states

DOC = {"uuid": "8ad8abc4-28c1-4ab8-b74d-3ec051a1242d", "project_id": "p1", "user_id": "u1",
       "name": "web", "created_at": 1.0, "updated_at": 2.0,
       "flavor": {"id": "1", "name": "m1.tiny", "vcpus": 1, "ram": 256, "disk": 1,
                  "ephemeral": 0, "swap": 0, "extra_specs": {"k": "v"}},
       "image": {"id": "file:///i", "url": "file:///i"}}


def server(state: str, **record) -> Server:
    return Server(dict(DOC), 1, {"uuid": DOC["uuid"], "state": state, "updated_at": 3.0,
                                 "host": "h", "host_name": "hv1", **record}, "h")


@pytest.mark.parametrize("state,task,expected", [
    (states.SCHEDULED, None, ("building", "scheduling", 0, "BUILD")),
    (states.BUILDING, None, ("building", "spawning", 0, "BUILD")),
    (states.ACTIVE, None, ("active", None, 1, "ACTIVE")),
    (states.SHUTOFF, None, ("stopped", None, 4, "SHUTOFF")),
    (states.STOPPING, None, ("active", "powering-off", 1, "ACTIVE")),
    (states.STARTING, None, ("stopped", "powering-on", 4, "SHUTOFF")),
    (states.SUSPENDED, None, ("suspended", None, 4, "SUSPENDED")),
    (states.SUSPENDING, {"from": "ACTIVE"}, ("active", "suspending", 1, "ACTIVE")),
    (states.RESUMING, {"from": "SUSPENDED"}, ("suspended", "resuming", 4, "SUSPENDED")),
    (states.SNAPSHOTTING, {"from": "SUSPENDED"}, ("suspended", "image_uploading", 4,
                                                  "SUSPENDED")),
    # A paused guest: frozen in memory, Nova's power_state 3 (PAUSED).
    (states.PAUSED, None, ("paused", None, 3, "PAUSED")),
    (states.PAUSING, {"from": "ACTIVE"}, ("active", "pausing", 1, "ACTIVE")),
    (states.UNPAUSING, {"from": "PAUSED"}, ("paused", "unpausing", 3, "PAUSED")),
    (states.SNAPSHOTTING, {"from": "PAUSED"}, ("paused", "image_uploading", 3, "PAUSED")),
    (states.REBOOTING, {"from": "PAUSED", "hard": True}, ("paused", "rebooting_hard", 3,
                                                          "PAUSED")),
    (states.REBOOTING, {"hard": True}, ("active", "rebooting_hard", 1, "HARD_REBOOT")),
    (states.REBOOTING, {}, ("active", "rebooting", 1, "REBOOT")),
    (states.REBUILDING, {"from": "SHUTOFF"}, ("stopped", "rebuilding", 4, "REBUILD")),
    (states.RESIZING, {"from": "ACTIVE"}, ("active", "resize_migrating", 1, "RESIZE")),
    (states.MIGRATING, {"from": "ACTIVE", "live": True}, ("active", "migrating", 1, "MIGRATING")),
    (states.MIGRATED, {"from": "ACTIVE", "live": True}, ("active", "migrating", 1, "MIGRATING")),
    (states.MIGRATING, {"from": "SHUTOFF", "live": False},
     ("stopped", "resize_migrating", 4, "RESIZE")),
    (states.MIGRATED, {"from": "ACTIVE", "live": False},
     ("active", "resize_migrating", 1, "RESIZE")),
    (states.FILTERING, {"from": "ACTIVE"}, ("active", None, 1, "ACTIVE")),
    (states.FILTERING, {"from": "SHUTOFF"}, ("stopped", None, 4, "SHUTOFF")),
    (states.DELETING, None, ("active", "deleting", 0, "ACTIVE")),
    (states.ERROR, None, ("error", None, 0, "ERROR")),
])
def test_states_map_as_novas(state, task, expected):
    shown = server(state, **({"task": {"id": DOC["uuid"], "at": 1.0, **task}} if task else {}))
    assert (*view.nova_states(shown), view.status(shown)) == expected


def request(version: str) -> ApiRequest:
    req = ApiRequest.blank("/v2.1/servers")
    req.environ["etcd_compute.version"] = Version.parse(version)
    return req


def render(version: str, state: str = states.ACTIVE, **kwargs) -> dict:
    options = {"network": "net", "show_extended": False, "show_extra_specs": False,
               "is_admin": False, **kwargs}
    return view.show(request(version), server(state, ip="10.0.0.5"), **options)


def test_fields_appear_at_their_microversions():
    old = render("2.1")
    assert old["flavor"]["id"] == "1" and "locked" not in old and "tags" not in old
    newer = render("2.79", show_extra_specs=True)
    assert newer["flavor"] == {"original_name": "m1.tiny", "vcpus": 1, "ram": 256,
                               "disk": 1, "ephemeral": 0, "swap": 0,
                               "extra_specs": {"k": "v"}}
    assert (newer["locked"], newer["description"], newer["tags"],
            newer["trusted_image_certificates"], newer["locked_reason"]) == \
        (False, None, [], None, None)
    assert newer["addresses"] == {"net": [{"version": 4, "addr": "10.0.0.5",
                                           "OS-EXT-IPS:type": "fixed"}]}
    assert newer["updated"] == "1970-01-01T00:00:03Z" and newer["progress"] == 100
    extended = render("2.3", show_extended=True)
    assert (extended["OS-EXT-SRV-ATTR:host"], extended["OS-EXT-SRV-ATTR:root_device_name"]) \
        == ("hv1", "/dev/vda")
    assert "OS-EXT-SRV-ATTR:hostname" not in render("2.1", show_extended=True)


def test_an_errors_details_are_the_admins():
    failed = Server(dict(DOC), 1, {"uuid": DOC["uuid"], "state": states.ERROR,
                                   "updated_at": 3.0, "error": "x" * 300})
    member = view.fault(failed, is_admin=False)
    assert len(member["message"]) == 255 and "details" not in member
    assert view.fault(failed, is_admin=True)["details"] == "x" * 300


REQUEST = "1b5d6c43-43f6-4c1e-9f8b-6c5a8a6f2a11"


def asked(action: str, at: float = 5.0, **extra) -> dict:
    return {"task": {"action": action, "request_id": REQUEST, "at": at, **extra}}


@pytest.mark.parametrize(("state", "task", "expected"), [
    (states.ACTIVE, asked("stop"), ("active", "powering-off", 1, "ACTIVE")),
    (states.SHUTOFF, asked("start"), ("stopped", "powering-on", 4, "SHUTOFF")),
    (states.ACTIVE, asked("suspend"), ("active", "suspending", 1, "ACTIVE")),
    (states.SUSPENDED, asked("resume"), ("suspended", "resuming", 4, "SUSPENDED")),
    (states.ACTIVE, asked("pause"), ("active", "pausing", 1, "ACTIVE")),
    (states.PAUSED, asked("unpause"), ("paused", "unpausing", 3, "PAUSED")),
    (states.ACTIVE, asked("reboot", hard=True), ("active", "rebooting_hard", 1,
                                                 "HARD_REBOOT")),
    (states.ACTIVE, asked("rebuild"), ("active", "rebuilding", 1, "REBUILD")),
    (states.SHUTOFF, asked("resize"), ("stopped", "resize_prep", 4, "RESIZE")),
])
def test_an_action_asked_shows_before_its_host_takes_it_up(state, task, expected):
    shown = server(state)
    shown.doc.update(task)
    assert (*view.nova_states(shown), view.status(shown)) == expected


def test_an_asked_action_stops_showing_once_taken_up_or_overtaken():
    taken = server(states.ACTIVE, request_id=REQUEST)
    taken.doc.update(asked("stop"))
    assert view.pending(taken) is None
    overtaken = server(states.ACTIVE, updated_at=9.0)  # the record moved after the ask
    overtaken.doc.update(asked("stop"))
    assert view.pending(overtaken) is None


def test_a_held_resize_is_verify_resize_and_its_revert_revert_resize():
    hold = {"consumer": REQUEST, "allocations": {}, "resources": {"VCPU": 1}}
    held = server(states.ACTIVE, resize_hold=hold)
    assert (*view.nova_states(held), view.status(held)) == ("resized", None, 1,
                                                             "VERIFY_RESIZE")
    held.doc.update(asked("revert-resize"))
    assert view.status(held) == "REVERT_RESIZE"
    reverting = server(states.RESIZING, resize_hold=hold,
                       task={"id": REQUEST, "at": 1.0, "from": "SHUTOFF", "reverts": REQUEST})
    assert view.nova_states(reverting) == ("resized", "resize_reverting", 4)


def test_a_reverted_cold_move_is_revert_resize_until_its_source_runs_it_again():
    """The source stays SHUTOFF until the destination discarded its copy, then the
    controller's start goes by the revert's request: REVERT_RESIZE through both, ACTIVE
    once done; another start is powering-on as ever."""
    waiting = server(states.SHUTOFF, request_id=None, updated_at=1.0)
    waiting.doc.update(asked("revert-resize"))
    assert (*view.nova_states(waiting), view.status(waiting)) == (
        "resized", "resize_reverting", 4, "REVERT_RESIZE")
    starting = server(states.STARTING, request_id=REQUEST,
                      task={"id": REQUEST, "at": 2.0, "action": "start", "from": "SHUTOFF"})
    starting.doc.update(asked("revert-resize"))
    assert (*view.nova_states(starting), view.status(starting)) == (
        "resized", "resize_reverting", 4, "REVERT_RESIZE")
    another = server(states.STARTING, task={"id": "x", "at": 2.0, "action": "start",
                                             "from": "SHUTOFF"})
    another.doc.update(asked("revert-resize"))
    assert view.nova_states(another) == ("stopped", "powering-on", 4)
    done = server(states.ACTIVE, request_id=REQUEST)
    done.doc.update(asked("revert-resize"))
    assert (*view.nova_states(done), view.status(done)) == ("active", None, 1, "ACTIVE")


def test_the_flavor_follows_the_instances_size():
    small = dict(DOC["flavor"], id="2", name="m1.small", vcpus=2)
    resized = server(states.ACTIVE, resources={"VCPU": 2})
    resized.doc["resize"] = {"hold": REQUEST, "request_id": REQUEST,
                             "old_flavor": DOC["flavor"], "new_flavor": small,
                             "resources": {"VCPU": 2}}
    assert view.flavor_of(resized)["name"] == "m1.small"
    resized.record["resources"] = {"VCPU": 1}  # failed or reverted
    assert view.flavor_of(resized)["name"] == "m1.tiny"


@pytest.mark.parametrize(("record", "doc_task", "expected"), [
    ({}, None, ["default"]),  # a record of before groups could be set: as built, default
    ({"security_groups": []}, None, []),
    ({"security_groups": ["default"]}, None, ["default"]),
    # Asked through the API, not taken up yet: the asked groups at once.
    ({"security_groups": ["default"], "request_id": None},
     {"action": "security-groups", "request_id": DOC["uuid"], "at": 4.0,
      "security_groups": []}, []),
    # Another action pending: the record's.
    ({"security_groups": [], "request_id": None},
     {"action": "stop", "request_id": DOC["uuid"], "at": 4.0}, []),
])
def test_a_servers_groups_are_the_asked_ones_until_the_host_ends_the_request(
        record, doc_task, expected):
    shown = server(states.ACTIVE, **record)
    if doc_task:
        shown.doc["task"] = doc_task
    assert view.security_groups(shown) == expected
    running = server(states.FILTERING, security_groups=["default"], task={
        "id": DOC["uuid"], "at": 1.0, "action": "security-groups", "from": "ACTIVE",
        "security_groups": []})
    assert view.security_groups(running) == []
    assert view.security_groups(Server(dict(DOC), 1)) == []  # no instance: no port


def test_a_server_in_no_group_has_no_security_groups_key():
    req = request("2.1")
    for groups, expected in (([], None), (["default"], [{"name": "default"}])):
        shown = view.show(req, server(states.ACTIVE, security_groups=groups), network="n",
                          show_extended=False, show_extra_specs=False, is_admin=False)
        assert shown.get("security_groups") == expected


def test_a_cold_move_awaiting_its_confirm_is_verify_resize():
    moving = server(states.MIGRATED, task={"id": REQUEST, "at": 1.0, "from": "SHUTOFF",
                                           "live": False})
    assert (*view.nova_states(moving), view.status(moving)) == (
        "stopped", "resize_migrating", 4, "RESIZE")
    moving.record["task"]["finished"] = True
    assert (*view.nova_states(moving), view.status(moving)) == ("resized", None, 4,
                                                                 "VERIFY_RESIZE")
    moving.doc.update(asked("revert-resize"))
    assert view.nova_states(moving)[0] == "resized"

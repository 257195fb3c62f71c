"""os-resetState, lock/unlock, restore/forceDelete: Nova's answers, the API's view only
(nothing is asked of the host), and a locked server refusing a non-admin."""

from __future__ import annotations

import uuid as uuidlib

import pytest

from etcd_compute import messages
from etcd_compute.instances import records
from tests.unit.api.harness import ADMIN, Harness


def active(harness: Harness) -> str:
    uuid = harness.boot()
    harness.activate(uuid)
    return uuid


def as_admin(harness: Harness, uuid: str, body: dict, **kwargs):
    return harness.action(uuid, body, roles=ADMIN, project="admin", user="root", **kwargs)


def spec_action(harness: Harness, uuid: str) -> str | None:
    host = records.locate(harness.store, uuid)["host"]
    spec = messages.decode(messages.INSTANCE_SPEC,
                           harness.store.get(harness.store.keys.spec(host, uuid)).value)
    return spec.get("action")


# --- os-resetState ---------------------------------------------------------------------------


def test_reset_state_shows_error_then_active_and_asks_nothing_of_the_host(harness: Harness):
    uuid = active(harness)
    answer = as_admin(harness, uuid, {"os-resetState": {"state": "error"}})
    assert answer.status_int == 202 and answer.body == b""
    shown = harness.show(uuid)
    assert (shown["status"], shown["OS-EXT-STS:vm_state"], shown["OS-EXT-STS:task_state"]) \
        == ("ERROR", "error", None)
    assert spec_action(harness, uuid) == "build"  # the host was asked nothing more
    listed = harness.call("GET", "/v2.1/servers/detail?status=ERROR").json["servers"]
    assert [s["id"] for s in listed] == [uuid]
    as_admin(harness, uuid, {"os-resetState": {"state": "active"}})
    assert harness.show(uuid)["status"] == "ACTIVE"


def test_a_server_reset_to_error_is_rebuilt_and_the_reset_ends_with_it(harness: Harness):
    uuid = active(harness)
    as_admin(harness, uuid, {"os-resetState": {"state": "error"}})
    # A member may stop or rebuild a server in error, as Nova lets them.
    answer = harness.action(uuid, {"rebuild": {"imageRef": "file:///dev/null"}})
    assert answer.status_int == 202, answer.text
    assert harness.show(uuid)["status"] == "REBUILD"
    harness.host_does(uuid)
    assert harness.show(uuid)["status"] == "ACTIVE"


def test_reset_state_is_for_admins_and_checks_its_body(harness: Harness):
    uuid = active(harness)
    answer = harness.action(uuid, {"os-resetState": {"state": "error"}})
    assert answer.status_int == 403
    assert "os_compute_api:os-admin-actions:reset_state" in answer.json["forbidden"]["message"]
    for body in ({"os-resetState": {"state": "paused"}}, {"os-resetState": {}},
                 {"os-resetState": {"state": "error", "more": 1}}):
        assert as_admin(harness, uuid, body).status_int == 400
    assert as_admin(harness, str(uuidlib.uuid4()),
                    {"os-resetState": {"state": "error"}}).status_int == 404
    assert harness.show(uuid)["status"] == "ACTIVE"


# --- lock, unlock ----------------------------------------------------------------------------


def test_a_locked_server_refuses_a_members_actions_and_delete_but_not_an_admins(
        harness: Harness):
    uuid = active(harness)
    assert harness.action(uuid, {"lock": None}).status_int == 202
    shown = harness.show(uuid, version="2.73")
    assert (shown["locked"], shown["locked_reason"]) == (True, None)
    answer = harness.action(uuid, {"os-stop": None})
    assert answer.status_int == 409
    assert answer.json["conflictingRequest"]["message"] == f"Instance {uuid} is locked"
    assert harness.call("DELETE", f"/v2.1/servers/{uuid}").status_int == 409
    assert spec_action(harness, uuid) == "build"  # neither stopped nor deleted
    # Reading is not acting: the console and the server are still shown.
    assert harness.action(uuid, {"os-getConsoleOutput": {}}).status_int == 200
    assert harness.action(uuid, {"unlock": None}).status_int == 202
    assert harness.show(uuid, version="2.73")["locked"] is False
    assert harness.action(uuid, {"os-stop": None}).status_int == 202


def test_a_lock_says_why_from_2_73_and_the_locked_filter_finds_it(harness: Harness):
    uuid, other = active(harness), active(harness)
    body = {"lock": {"locked_reason": "maintenance"}}
    assert harness.action(uuid, body, version="2.72").status_int == 202  # not looked at
    assert harness.show(uuid, version="2.73")["locked_reason"] is None
    assert harness.action(uuid, body, version="2.73").status_int == 202
    assert harness.show(uuid, version="2.73")["locked_reason"] == "maintenance"
    assert harness.action(uuid, {"lock": {"locked_reason": ""}},
                          version="2.73").status_int == 400
    assert harness.action(uuid, {"lock": {"why": "x"}}, version="2.73").status_int == 400
    found = harness.call("GET", "/v2.1/servers?locked=true", version="2.73").json["servers"]
    assert [s["id"] for s in found] == [uuid]
    found = harness.call("GET", "/v2.1/servers?locked=false", version="2.73").json["servers"]
    assert [s["id"] for s in found] == [other]


def test_an_admins_lock_is_undone_by_an_admin_only(harness: Harness):
    uuid = active(harness)
    assert as_admin(harness, uuid, {"lock": None}).status_int == 202
    assert harness.action(uuid, {"os-stop": None}).status_int == 409
    answer = harness.action(uuid, {"unlock": None})
    assert answer.status_int == 403
    assert "unlock:unlock_override" in answer.json["forbidden"]["message"]
    assert as_admin(harness, uuid, {"os-stop": None}).status_int == 202
    assert as_admin(harness, uuid, {"unlock": None}).status_int == 202
    assert harness.show(uuid, version="2.9")["locked"] is False


def test_lock_is_for_the_project_members(harness: Harness):
    uuid = active(harness)
    assert harness.action(uuid, {"lock": None}, project="p2").status_int == 404
    assert harness.action(uuid, {"lock": None}, roles=("reader",)).status_int == 403


# --- restore, forceDelete --------------------------------------------------------------------


@pytest.mark.parametrize("action", ["restore", "forceDelete"])
def test_restore_and_force_delete_need_a_soft_deleted_server_there_is_never_one(
        harness: Harness, action):
    uuid = active(harness)
    before = harness.store.revision
    answer = harness.action(uuid, {action: None})
    assert answer.status_int == 409
    assert answer.json["conflictingRequest"]["message"] == \
        f"Cannot '{action}' instance {uuid} while it is in vm_state active"
    assert harness.store.revision == before
    assert harness.action(str(uuidlib.uuid4()), {action: None}).status_int == 404
    assert harness.action(uuid, {action: None}, project="p2").status_int == 404


def test_a_locked_servers_metadata_is_changed_by_an_admin_only(harness: Harness):
    uuid = active(harness)
    harness.action(uuid, {"lock": None})
    path = f"/v2.1/servers/{uuid}/metadata"
    assert harness.call("POST", path, {"metadata": {"k": "v"}}).status_int == 409
    assert harness.call("GET", path).json == {"metadata": {}}
    assert harness.admin("POST", path, {"metadata": {"k": "v"}}).status_int == 200


def test_inject_network_info_is_an_admins_202_that_changes_nothing(harness: Harness):
    uuid = active(harness)
    before = harness.store.revision
    assert harness.action(uuid, {"injectNetworkInfo": None}).status_int == 403
    answer = harness.admin("POST", f"/v2.1/servers/{uuid}/action", {"injectNetworkInfo": None})
    assert answer.status_int == 202 and answer.body == b""
    assert harness.store.revision == before
    missing = harness.admin("POST", "/v2.1/servers/" + "0" * 32 + "/action",
                            {"injectNetworkInfo": None})
    assert missing.status_int == 404

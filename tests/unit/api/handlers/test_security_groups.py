"""addSecurityGroup, removeSecurityGroup over the one group there is, `default`: Nova's
checks and messages, hostile bodies refused with nothing written, the membership shown at
once and kept by the instance (spec and record) once its host has swapped the filter."""

from __future__ import annotations

import pytest

from tests.unit.api.harness import Harness, active, spec_of


@pytest.mark.parametrize("body", [
    {"removeSecurityGroup": None}, {"removeSecurityGroup": "default"},
    {"removeSecurityGroup": {}}, {"removeSecurityGroup": {"name": 7}},
    {"removeSecurityGroup": {"name": {"name": "default"}}},
    {"removeSecurityGroup": {"name": ["default"]}}, {"removeSecurityGroup": {"name": ""}},
    {"removeSecurityGroup": {"name": "   "}},
    {"removeSecurityGroup": {"name": "default", "id": "x"}},
    {"removeSecurityGroup": {"name": "default"}, "addSecurityGroup": {"name": "default"}},
])
def test_a_hostile_body_is_400_and_writes_nothing(harness: Harness, body):
    uuid = active(harness)
    before = harness.store.revision
    answer = harness.action(uuid, body)
    assert answer.status_int == 400, answer.text
    assert harness.store.revision == before
    assert harness.show(uuid)["security_groups"] == [{"name": "default"}]


def test_a_long_or_unknown_name_is_novas_404_naming_it_bounded(harness: Harness):
    uuid = active(harness)
    before = harness.store.revision
    for action in ("addSecurityGroup", "removeSecurityGroup"):
        answer = harness.action(uuid, {action: {"name": "web"}})
        assert answer.status_int == 404
        assert answer.json["itemNotFound"]["message"] == \
            "Security group web is not found for project p1"
        answer = harness.action(uuid, {action: {"name": "x" * 100000}})
        assert answer.status_int == 404 and len(answer.json["itemNotFound"]["message"]) < 300
    assert harness.store.revision == before


def test_who_may_ask_another_projects_server_and_a_reader(harness: Harness):
    uuid = active(harness)
    before = harness.store.revision
    body = {"removeSecurityGroup": {"name": "default"}}
    assert harness.action(uuid, body, project="p2").status_int == 404
    assert harness.action(uuid, body, roles=("reader",)).status_int == 403
    assert harness.store.revision == before


def test_remove_then_add_default_shown_at_once_and_kept_by_the_instance(harness: Harness):
    uuid = active(harness)
    assert harness.show(uuid)["security_groups"] == [{"name": "default"}]
    answer = harness.action(uuid, {"removeSecurityGroup": {"name": "default"}})
    assert answer.status_int == 202 and answer.body == b""
    shown = harness.show(uuid)
    assert "security_groups" not in shown  # Nova leaves the key out for none
    assert (shown["status"], shown["OS-EXT-STS:task_state"]) == ("ACTIVE", None)
    assert spec_of(harness, uuid)["action"] == "security-groups"
    assert spec_of(harness, uuid)["request"]["security_groups"] == []
    record = harness.host_does(uuid)
    assert record["state"] == "ACTIVE" and record["security_groups"] == []
    assert spec_of(harness, uuid)["security_groups"] == []
    assert "security_groups" not in harness.show(uuid)
    listed = harness.call("GET", "/v2.1/servers/detail").json["servers"]
    assert "security_groups" not in listed[0]
    # Not in it: Nova's 404 naming the instance.
    answer = harness.action(uuid, {"removeSecurityGroup": {"name": "default"}})
    assert answer.status_int == 404
    assert answer.json["itemNotFound"]["message"] == \
        f"Security group default not associated with the instance {uuid}"
    assert harness.action(uuid, {"addSecurityGroup": {"name": "default"}}).status_int == 202
    assert harness.show(uuid)["security_groups"] == [{"name": "default"}]
    harness.host_does(uuid)
    assert spec_of(harness, uuid)["security_groups"] == ["default"]
    # In it already: nothing to do, nothing written (Neutron keeps a port's groups a set).
    before = harness.store.revision
    assert harness.action(uuid, {"addSecurityGroup": {"name": "default"}}).status_int == 202
    assert harness.store.revision == before


def test_a_failed_swap_shows_the_groups_the_guest_still_has(harness: Harness):
    uuid = active(harness)
    harness.action(uuid, {"removeSecurityGroup": {"name": "default"}})
    record = harness.host_does(uuid, error="security-groups: libvirt said no")
    assert record["security_groups"] == ["default"]
    assert harness.show(uuid)["security_groups"] == [{"name": "default"}]
    assert "security_groups" not in spec_of(harness, uuid)


def test_a_locked_server_is_changed_as_nova_does_not_check_the_lock(harness: Harness):
    uuid = active(harness)
    assert harness.action(uuid, {"lock": None}).status_int == 202
    assert harness.action(uuid, {"removeSecurityGroup": {"name": "default"}}).status_int == 202


def test_a_server_not_active_or_stopped_is_409_and_writes_nothing(harness: Harness):
    uuid = harness.boot()  # still SCHEDULED
    before = harness.store.revision
    answer = harness.action(uuid, {"removeSecurityGroup": {"name": "default"}})
    assert answer.status_int == 409, answer.text
    assert harness.store.revision == before
    active_one = active(harness, name="db")
    harness.action(active_one, {"os-stop": None})  # pending: one request at a time
    answer = harness.action(active_one, {"removeSecurityGroup": {"name": "default"}})
    assert answer.status_int == 409 and "pending" in answer.json["conflictingRequest"]["message"]


def test_a_server_without_a_network_has_no_group_nor_port(harness: Harness):
    uuid = harness.boot(networks="none", version="2.37")
    harness.activate(uuid)
    assert "security_groups" not in harness.show(uuid)
    for action in ("addSecurityGroup", "removeSecurityGroup"):
        answer = harness.action(uuid, {action: {"name": "default"}})
        assert answer.status_int == 404
        assert answer.json["itemNotFound"]["message"] == \
            f"instance_id {uuid} could not be found as device id on any ports"

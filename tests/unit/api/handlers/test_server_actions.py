"""Server actions (POST /servers/{id}/action): each goes to the host through the operator's
path with the API's view written alongside (Nova's task_state at once), Nova's state
checks and messages, a resize holds its old size until confirmed or reverted, and every
refusal writes and claims nothing."""

from __future__ import annotations

import base64

import pytest

from etcd_compute import events, messages
from etcd_compute.instances import records
from tests.unit.api.harness import ADMIN, Harness, active, spec_of


@pytest.fixture
def harness(harness: Harness) -> Harness:
    """The usual world and the m1.small flavor to resize to."""
    harness.add_flavor("2", "m1.small", vcpus=2, ram=512, disk=2)
    return harness


def states_of(shown: dict) -> tuple:
    return (shown["status"], shown["OS-EXT-STS:vm_state"], shown["OS-EXT-STS:task_state"],
            shown["OS-EXT-STS:power_state"])


def test_stop_shows_powering_off_at_once_and_stopped_once_done(harness: Harness):
    uuid = active(harness)
    answer = harness.action(uuid, {"os-stop": None})
    assert answer.status_int == 202 and answer.body == b""
    assert spec_of(harness, uuid)["action"] == "stop"
    assert states_of(harness.show(uuid)) == ("ACTIVE", "active", "powering-off", 1)
    harness.host_does(uuid)
    assert states_of(harness.show(uuid)) == ("SHUTOFF", "stopped", None, 4)
    harness.action(uuid, {"os-start": None})
    assert states_of(harness.show(uuid)) == ("SHUTOFF", "stopped", "powering-on", 4)
    harness.host_does(uuid)
    assert states_of(harness.show(uuid)) == ("ACTIVE", "active", None, 1)


def test_an_action_the_state_does_not_allow_is_novas_409_and_writes_nothing(harness: Harness):
    uuid = active(harness)
    before = harness.store.revision
    answer = harness.action(uuid, {"os-start": None})
    assert answer.status_int == 409
    assert answer.json["conflictingRequest"]["message"] == \
        f"Cannot 'start' instance {uuid} while it is in vm_state active"
    harness.action(uuid, {"os-stop": None})
    answer = harness.action(uuid, {"reboot": {"type": "SOFT"}})
    assert answer.json["conflictingRequest"]["message"] == \
        f"Cannot 'reboot' instance {uuid} while it is in task_state powering-off"
    assert harness.store.revision == before + 1  # the stop only


@pytest.mark.parametrize(("kind", "task", "status"), [("SOFT", "rebooting", "REBOOT"),
                                                      ("hard", "rebooting_hard",
                                                       "HARD_REBOOT")])
def test_reboot_soft_and_hard(harness: Harness, kind, task, status):
    uuid = active(harness)
    assert harness.action(uuid, {"reboot": {"type": kind}}).status_int == 202
    assert spec_of(harness, uuid)["request"]["hard"] is (kind.upper() == "HARD")
    assert states_of(harness.show(uuid))[:3] == (status, "active", task)
    harness.host_does(uuid)
    assert harness.show(uuid)["status"] == "ACTIVE"


def test_a_hard_reboot_of_a_stopped_server_powers_it_on(harness: Harness):
    uuid = active(harness)
    harness.action(uuid, {"os-stop": None})
    harness.host_does(uuid)
    assert harness.action(uuid, {"reboot": {"type": "HARD"}}).status_int == 202
    assert spec_of(harness, uuid)["action"] == "start"
    # Nova shows a stopped server rebooting as SHUTOFF until it runs.
    assert states_of(harness.show(uuid))[:3] == ("SHUTOFF", "stopped", "rebooting_hard")
    harness.host_does(uuid)
    assert harness.show(uuid)["status"] == "ACTIVE"


def test_a_resize_holds_the_old_size_until_it_is_confirmed(harness: Harness):
    uuid = active(harness)
    assert harness.action(uuid, {"resize": {"flavorRef": "2"}}).status_int == 202
    shown = harness.show(uuid)
    assert states_of(shown)[:3] == ("RESIZE", "active", "resize_prep")
    held = [c for c, d in harness.placement.consumers.items()
            if d.get("consumer_type") == "MIGRATION"]
    assert len(held) == 1
    assert harness.placement.consumers[held[0]]["allocations"] != \
        harness.placement.consumers[uuid]["allocations"]
    assert harness.placement.project_usages("p1", "INSTANCE") == {
        "consumer_count": 1, "VCPU": 2, "MEMORY_MB": 512, "DISK_GB": 2}
    harness.host_does(uuid)
    shown = harness.show(uuid, version="2.47")
    assert states_of(shown) == ("VERIFY_RESIZE", "resized", None, 1)
    assert shown["flavor"]["original_name"] == "m1.small"
    assert harness.action(uuid, {"confirmResize": None}).status_int == 204
    assert held[0] not in harness.placement.consumers
    shown = harness.show(uuid, version="2.47")
    assert states_of(shown) == ("ACTIVE", "active", None, 1)
    assert shown["flavor"]["original_name"] == "m1.small"
    host = records.locate(harness.store, uuid)["host"]
    assert [e["action"] for e in events.read(harness.store, host, uuid)][-2:] == [
        "resize", "confirm-resize"]


def test_a_revert_goes_back_to_the_old_flavor_and_frees_the_hold(harness: Harness):
    uuid = active(harness)
    old = dict(harness.placement.consumers[uuid]["allocations"])
    harness.action(uuid, {"resize": {"flavorRef": "2"}})
    harness.host_does(uuid)
    assert harness.action(uuid, {"revertResize": None}).status_int == 202
    assert states_of(harness.show(uuid))[:3] == ("REVERT_RESIZE", "resized", "resize_reverting")
    assert harness.placement.consumers[uuid]["allocations"] == old
    assert [c for c, d in harness.placement.consumers.items() if c != uuid] == []
    harness.host_does(uuid)
    shown = harness.show(uuid, version="2.47")
    assert states_of(shown) == ("ACTIVE", "active", None, 1)
    assert shown["flavor"]["original_name"] == "m1.tiny"


def test_a_failed_resize_keeps_the_old_flavor(harness: Harness):
    uuid = active(harness)
    harness.action(uuid, {"resize": {"flavorRef": "2"}})
    harness.host_does(uuid, error="cannot resize")
    shown = harness.show(uuid, version="2.47")
    assert shown["status"] == "ACTIVE" and shown["flavor"]["original_name"] == "m1.tiny"


@pytest.mark.parametrize(("body", "status", "fragment"), [
    ({"resize": {"flavorRef": "2"}}, 400, "When resizing, instances must change flavor!"),
    ({"resize": {"flavorRef": "9"}}, 400, "Flavor 9 could not be found."),
    ({"resize": {"flavorRef": "3"}}, 409, "no room for it on its host"),
    ({"resize": {"flavorRef": "4"}}, 403, "Quota exceeded for cores: Requested 30"),
    ({"resize": {"flavorRef": "5"}}, 400, "Unable to resize disk down."),
    ({"resize": {}}, 400, "'flavorRef' is a required property"),
    ({"confirmResize": None}, 409, "while it is in vm_state active"),
    ({"revertResize": None}, 409, "while it is in vm_state active"),
])
def test_a_refused_resize_writes_and_claims_nothing(harness: Harness, body, status, fragment):
    harness.add_flavor("3", "huge", vcpus=15, ram=512, disk=2)
    harness.add_flavor("4", "many", vcpus=32, ram=512, disk=2)
    harness.add_flavor("5", "small-disk", vcpus=1, ram=256, disk=1)
    uuid = active(harness, flavorRef="2")
    before, claims = harness.store.revision, dict(harness.placement.consumers)
    answer = harness.action(uuid, body)
    assert answer.status_int == status, answer.text
    assert fragment in list(answer.json.values())[0]["message"]
    assert harness.store.revision == before and harness.placement.consumers == claims


def test_nothing_but_confirm_or_revert_while_a_resize_waits(harness: Harness):
    uuid = active(harness)
    harness.action(uuid, {"resize": {"flavorRef": "2"}})
    harness.host_does(uuid)
    answer = harness.action(uuid, {"os-stop": None})
    assert answer.json["conflictingRequest"]["message"] == \
        f"Cannot 'stop' instance {uuid} while it is in vm_state resized"


def test_a_rebuild_answers_the_server_and_gives_the_guest_its_new_data(harness: Harness):
    harness.call("POST", "/v2.1/os-keypairs", {"keypair": {"name": "k2"}}, version="2.2")
    uuid = active(harness)
    user_data = base64.b64encode(b"#!/bin/sh\necho hi\n").decode()
    answer = harness.action(uuid, {"rebuild": {
        "imageRef": "file:///dev/zero", "name": "new name", "metadata": {"x": "y"},
        "key_name": "k2", "user_data": user_data}}, version="2.75")
    assert answer.status_int == 202, answer.text
    shown = answer.json["server"]
    assert (shown["status"], shown["OS-EXT-STS:task_state"]) == ("REBUILD", "rebuilding")
    assert (shown["name"], shown["metadata"], shown["key_name"]) == ("new name", {"x": "y"},
                                                                     "k2")
    assert shown["image"]["id"] == "file:///dev/zero" and shown["user_data"] == user_data
    assert answer.headers["Location"].endswith(f"/servers/{uuid}")
    request = spec_of(harness, uuid)["request"]
    assert request["image"]["url"] == "file:///dev/zero"
    assert request["user_data"] == "#!/bin/sh\necho hi\n"
    assert request["ssh_key"].startswith("ssh-rsa ")
    harness.host_does(uuid)
    assert harness.show(uuid)["status"] == "ACTIVE"
    # An admin's rebuild answers user_data, never the extended attribute (Nova's view).
    answer = harness.action(uuid, {"rebuild": {"imageRef": "file:///dev/zero"}},
                            version="2.75", roles=ADMIN, project="admin", user="root")
    assert answer.status_int == 202, answer.text
    assert "OS-EXT-SRV-ATTR:user_data" not in answer.json["server"]
    assert "OS-EXT-SRV-ATTR:host" in answer.json["server"]


def test_a_rebuild_before_2_75_answers_less_and_refuses_an_image_we_do_not_serve(
        harness: Harness):
    uuid = active(harness)
    answer = harness.action(uuid, {"rebuild": {"imageRef": "http://elsewhere/x.img"}})
    assert answer.status_int == 400
    assert answer.json["badRequest"]["message"] == "Cannot find image for rebuild"
    answer = harness.action(uuid, {"rebuild": {"imageRef": "file:///dev/null",
                                               "key_name": "k"}}, version="2.53")
    assert answer.status_int == 400  # key_name is 2.54's
    answer = harness.action(uuid, {"rebuild": {"imageRef": "file:///dev/null"}})
    assert answer.status_int == 202
    assert "OS-EXT-STS:task_state" not in answer.json["server"]
    # Addresses stay, without their extended attributes (Nova's extend_address=False).
    addresses = [a for found in answer.json["server"]["addresses"].values() for a in found]
    assert addresses and all(set(a) == {"version", "addr"} for a in addresses)
    harness.host_does(uuid)
    answer = harness.action(uuid, {"rebuild": {"imageRef": "file:///dev/null"}},
                            version="2.71")
    assert answer.json["server"]["server_groups"] == []


def test_console_output_is_the_published_tail(harness: Harness):
    uuid = harness.boot()
    answer = harness.action(uuid, {"os-getConsoleOutput": {}})
    assert answer.status_int == 409
    assert answer.json["conflictingRequest"]["message"] == f"Instance {uuid} is not ready"
    harness.activate(uuid)
    assert harness.action(uuid, {"os-getConsoleOutput": {}}).json == {"output": ""}
    host = records.locate(harness.store, uuid)["host"]
    harness.store.put(messages.CONSOLE, harness.store.keys.console(host, uuid),
                      {"uuid": uuid, "text": "one\r\ntwo\x07\nthree\n", "updated_at": 1.0})
    # Nova's tail counts the empty piece after the last newline (Tempest checks that 3
    # asked is 3 pieces of output.split("\n")).
    assert harness.action(uuid, {"os-getConsoleOutput": {"length": "2"}}).json == {
        "output": "three\n"}
    assert harness.action(uuid, {"os-getConsoleOutput": {"length": 3}}).json == {
        "output": "two\nthree\n"}
    assert harness.action(uuid, {"os-getConsoleOutput": {"length": -1}}).json == {
        "output": "one\ntwo\nthree\n"}
    assert harness.action(uuid, {"os-getConsoleOutput": {"length": "-7"}}).json == {
        "output": "one\ntwo\nthree\n"}
    assert harness.action(uuid, {"os-getConsoleOutput": {"length": 0}}).json == {
        "output": ""}


@pytest.mark.parametrize(("body", "status", "fragment"), [
    ({"frobnicate": None}, 400, "There is no such action: frobnicate"),
    ({"os-stop": None, "os-start": None}, 400, "Malformed request body"),
    ({"reboot": {"type": "GENTLE"}}, 400, "Invalid input for field/attribute type"),
    ({"os-getConsoleOutput": {"length": "x"}}, 400, "Invalid input"),
])
def test_malformed_actions_are_400(harness: Harness, body, status, fragment):
    uuid = active(harness)
    answer = harness.action(uuid, body)
    assert answer.status_int == status and fragment in answer.json["badRequest"]["message"]


def test_another_projects_server_is_404_and_a_reader_may_not_act(harness: Harness):
    uuid = active(harness)
    assert harness.action(uuid, {"os-stop": None}, project="p2").status_int == 404
    answer = harness.action(uuid, {"os-stop": None}, roles=("reader",))
    assert answer.status_int == 403
    assert "os_compute_api:servers:stop" in answer.json["forbidden"]["message"]
    assert harness.action(uuid, {"os-stop": None}, roles=ADMIN, project="admin",
                          user="root").status_int == 202


def test_a_pending_action_another_request_overtook_is_no_longer_shown(harness: Harness):
    from etcd_compute.ops import lifecycle

    uuid = active(harness)
    harness.action(uuid, {"os-stop": None})
    # An operator asks for a reboot over it with schedule.py before the host took it up:
    # refused while the stop is pending, so the stop stays shown until the host acts.
    with pytest.raises(Exception, match="pending"):
        lifecycle.request(harness.store, harness.placement, uuid, "reboot")
    assert harness.show(uuid)["OS-EXT-STS:task_state"] == "powering-off"
    harness.host_does(uuid, error="the guest would not stop")
    assert states_of(harness.show(uuid)) == ("ACTIVE", "active", None, 1)


def test_a_resize_confirmed_by_an_operator_keeps_the_new_flavor_in_the_view(harness: Harness):
    from etcd_compute.ops import lifecycle

    uuid = active(harness)
    harness.action(uuid, {"resize": {"flavorRef": "2"}})
    harness.host_does(uuid)
    lifecycle.confirm_resize(harness.store, harness.placement, uuid)  # schedule.py's
    shown = harness.show(uuid, version="2.47")
    assert states_of(shown) == ("ACTIVE", "active", None, 1)
    assert shown["flavor"]["original_name"] == "m1.small"


def test_create_image_makes_the_projects_snapshot_and_nothing_when_refused(harness: Harness):
    from tests.unit.api.objects.test_images import FakeGlance

    uuid = active(harness)
    answer = harness.action(uuid, {"createImage": {"name": "snap"}})
    assert answer.status_int == 400 and "Glance" in answer.json["badRequest"]["message"]
    glance = harness.backend.images.glance = FakeGlance()
    answer = harness.action(uuid, {"createImage": {"name": "snap", "metadata": {"k": "v"}}},
                            version="2.45")
    assert answer.status_int == 202, answer.text
    image_id = answer.json["image_id"]
    assert glance.images[image_id]["owner"] == "p1" and glance.updated[image_id] == {"k": "v"}
    assert spec_of(harness, uuid)["request"]["snapshot"]["image_id"] == image_id
    assert harness.show(uuid)["OS-EXT-STS:task_state"] == "image_snapshot"
    harness.host_does(uuid)
    answer = harness.action(uuid, {"createImage": {"name": "old"}})  # before 2.45
    assert answer.status_int == 202 and answer.body == b""
    assert answer.headers["Location"].startswith(f"{glance.endpoint}/images/")
    harness.host_does(uuid)
    made = len(glance.images)
    harness.store.delete(harness.store.keys.alive(records.locate(harness.store,
                                                                uuid)["host"]))
    answer = harness.action(uuid, {"createImage": {"name": "again"}})
    assert answer.status_int == 409 and "is down" in answer.json["conflictingRequest"][
        "message"]
    assert len(glance.images) == made  # refused before any image was made


def test_create_backup_is_a_snapshot_with_novas_backup_properties_and_its_rotation(
        harness: Harness):
    from tests.unit.api.objects.test_images import FakeGlance

    uuid = active(harness)
    glance = harness.backend.images.glance = FakeGlance()
    body = {"createBackup": {"name": "b1", "backup_type": "daily", "rotation": 2,
                             "metadata": {"k": "v"}}}
    answer = harness.action(uuid, body, version="2.45")
    assert answer.status_int == 202, answer.text
    image_id = answer.json["image_id"]
    assert glance.updated[image_id] == {"k": "v", "image_type": "backup",
                                        "backup_type": "daily"}
    snapshot = spec_of(harness, uuid)["request"]["snapshot"]
    assert (snapshot["image_id"], snapshot["rotation"]) == (
        image_id, {"backup_type": "daily", "keep": 2})
    harness.host_does(uuid)
    # Before 2.45 the image's URL, unless rotation 0 (Nova's); refused bodies are 400.
    answer = harness.action(uuid, {"createBackup": {**body["createBackup"], "rotation": 0}})
    assert answer.status_int == 202 and "Location" not in answer.headers
    harness.host_does(uuid)
    answer = harness.action(uuid, body)
    assert answer.headers["Location"].startswith(f"{glance.endpoint}/images/")
    harness.host_does(uuid)
    made = len(glance.images)
    answer = harness.action(uuid, {"createBackup": {"name": "b", "backup_type": "daily"}})
    assert answer.status_int == 400
    assert harness.action(uuid, body, roles=("reader",)).status_int == 403
    assert len(glance.images) == made


# --- os-migrateLive ------------------------------------------------------------------------


def movable(harness: Harness) -> tuple[str, str, str]:
    """An ACTIVE server on hv1, a second host, the controller running: (uuid, from, to)."""
    uuid = active(harness)
    source = records.locate(harness.store, uuid)["host"]
    target = harness.add_host("hv2")
    harness.store.put(messages.CONTROLLER_LEADER, harness.store.keys.leader(),
                      {"name": "c", "since": 1.0})
    return uuid, source, target


def live(host=None, block="auto", **more) -> dict:
    return {"os-migrateLive": {"host": host, "block_migration": block, **more}}


def test_an_admin_moves_a_server_live_holding_both_hosts(harness: Harness):
    uuid, source, target = movable(harness)
    answer = harness.action(uuid, live("hv2"), roles=ADMIN, project="admin", user="root",
                            version="2.68")
    assert answer.status_int == 202 and answer.body == b""
    spec = spec_of(harness, uuid)
    assert spec["action"] == "migrate" and spec["request"]["live"] is True
    assert spec["request"]["destination"] == target
    assert spec["request"]["by"] == "api:root@admin"
    assert set(harness.placement.get_allocations(uuid)["allocations"]) == {target}
    hold = harness.placement.consumers[spec["request"]["migration"]]
    assert set(hold["allocations"]) == {source} and hold["consumer_type"] == "MIGRATION"
    assert hold["project_id"] == "p1"  # the server's project, counted apart from instances
    from etcd_compute.instances import actions as action_txn

    entry = harness.store.get(harness.store.keys.spec(source, uuid))
    assert action_txn.begin_action(harness.store, spec, entry.mod_revision,
                                   records.read_record(harness.store, source, uuid))
    assert states_of(harness.show(uuid)) == ("MIGRATING", "active", "migrating", 1)
    again = harness.action(uuid, live(), roles=ADMIN, project="admin", user="root",
                           version="2.68")
    assert again.status_int == 409 and "task_state migrating" in again.text


def test_a_live_move_shows_migrating_from_its_202_until_its_host_takes_it(harness: Harness):
    """As Nova's API sets task_state migrating before it answers: a client that waits for
    ACTIVE with no task right after the 202 (Tempest's scenario tests) waits for the move,
    not for nothing. A move given up before it began leaves no task behind."""
    uuid, source, _target = movable(harness)
    answer = harness.action(uuid, live("hv2"), roles=ADMIN, project="admin", user="root",
                            version="2.68")
    assert answer.status_int == 202
    assert states_of(harness.show(uuid)) == ("MIGRATING", "active", "migrating", 1)
    again = harness.action(uuid, live(), roles=ADMIN, project="admin", user="root",
                           version="2.68")
    assert again.status_int == 409 and "task_state migrating" in again.text
    harness.store.delete(harness.store.keys.migration(uuid))  # given up before it began
    assert states_of(harness.show(uuid)) == ("ACTIVE", "active", None, 1)


def test_a_cold_move_shows_resize_prep_from_its_202(harness: Harness):
    uuid, _source, _target = movable(harness)
    answer = harness.action(uuid, {"migrate": {"host": "hv2"}}, roles=ADMIN, project="admin",
                            user="root", version="2.56")
    assert answer.status_int == 202
    assert states_of(harness.show(uuid)) == ("RESIZE", "active", "resize_prep", 1)


@pytest.mark.parametrize("version,body,status,says", [
    ("2.1", live(block=True), 400, "disk_over_commit"),  # required before 2.25
    ("2.24", live(block="auto", disk_over_commit=False), 400, "auto"),
    ("2.68", live(block="auto", force=True), 400, "force"),  # 2.30 to 2.67 only
    ("2.68", live(block=False), 400, "shared storage"),  # our disks are local
    ("2.68", live("nohost"), 400, "Compute host nohost could not be found."),
])
def test_os_migrate_live_refusals_write_and_claim_nothing(harness: Harness, version, body,
                                                         status, says):
    uuid, _source, _target = movable(harness)
    before, calls = harness.store.revision, list(harness.placement.calls)
    answer = harness.action(uuid, body, roles=ADMIN, project="admin", user="root",
                            version=version)
    assert answer.status_int == status and says in answer.text, answer.text
    assert harness.store.revision == before and harness.placement.calls == calls


def test_os_migrate_live_is_for_admins_on_running_servers_with_a_controller(harness: Harness):
    uuid, _source, _target = movable(harness)
    assert harness.action(uuid, live(), version="2.68").status_int == 403  # its member
    old = live(block=True, disk_over_commit=False)
    assert harness.action(uuid, old, roles=ADMIN, project="admin", user="root",
                          version="2.1").status_int == 202  # before 2.25, scheduler's pick
    stopped = active(harness, name="db")
    harness.action(stopped, {"os-stop": None})
    harness.host_does(stopped)
    answer = harness.action(stopped, live(), roles=ADMIN, project="admin", user="root",
                            version="2.68")
    assert answer.status_int == 409 and "vm_state stopped" in answer.text
    other = active(harness, name="cache")
    harness.store.delete(harness.store.keys.leader())
    answer = harness.action(other, live(), roles=ADMIN, project="admin", user="root",
                            version="2.68")
    assert answer.status_int == 400 and "needs the controller" in answer.text


# --- migrate (cold) ------------------------------------------------------------------------


def test_an_admin_moves_a_server_cold_to_the_host_named_from_2_56(harness: Harness):
    uuid, source, target = movable(harness)
    assert harness.action(uuid, {"migrate": None}).status_int == 403  # its member
    answer = harness.action(uuid, {"migrate": {"host": "hv2"}}, roles=ADMIN, project="admin",
                            user="root", version="2.56")
    assert answer.status_int == 202 and answer.body == b""
    spec = spec_of(harness, uuid)
    assert spec["action"] == "migrate" and spec["request"]["live"] is False
    assert spec["request"]["destination"] == target
    assert set(harness.placement.get_allocations(uuid)["allocations"]) == {target}
    hold = harness.placement.consumers[spec["request"]["migration"]]
    assert set(hold["allocations"]) == {source} and hold["consumer_type"] == "MIGRATION"


@pytest.mark.parametrize("version,body,status,says", [
    ("2.55", {"migrate": {"host": "hv2"}}, 202, ""),  # before 2.56 any value, no host
    ("2.56", {"migrate": {"host": "nohost"}}, 400, "Compute host nohost could not be found."),
    ("2.56", {"migrate": {"force": True}}, 400, "Additional properties"),
])
def test_migrate_bodies_as_novas(harness: Harness, version, body, status, says):
    uuid, _source, target = movable(harness)
    answer = harness.action(uuid, body, roles=ADMIN, project="admin", user="root",
                            version=version)
    assert answer.status_int == status and says in answer.text, answer.text
    if status == 202:
        assert spec_of(harness, uuid)["request"]["destination"] == target


def test_migrate_of_a_server_that_is_not_there_is_404(harness: Harness):
    import uuid as uuidlib

    answer = harness.action(str(uuidlib.uuid4()), {"migrate": None}, roles=ADMIN,
                            project="admin", user="root")
    assert answer.status_int == 404


def test_suspend_shows_suspending_at_once_and_suspended_once_done_then_resume(
        harness: Harness):
    uuid = active(harness)
    answer = harness.action(uuid, {"suspend": None})
    assert answer.status_int == 202 and answer.body == b""
    assert spec_of(harness, uuid)["action"] == "suspend"
    assert states_of(harness.show(uuid)) == ("ACTIVE", "active", "suspending", 1)
    harness.host_does(uuid)
    # Nova: vm_state suspended, the guest shut off with its memory kept (power_state 4).
    assert states_of(harness.show(uuid)) == ("SUSPENDED", "suspended", None, 4)
    assert harness.action(uuid, {"resume": None}).status_int == 202
    assert spec_of(harness, uuid)["action"] == "resume"
    assert states_of(harness.show(uuid)) == ("SUSPENDED", "suspended", "resuming", 4)
    harness.host_does(uuid)
    assert states_of(harness.show(uuid)) == ("ACTIVE", "active", None, 1)


@pytest.mark.parametrize(("body", "action"), [
    ({"os-start": None}, "start"), ({"os-stop": None}, "stop"),
    ({"reboot": {"type": "SOFT"}}, "reboot"), ({"suspend": None}, "suspend"),
    ({"resize": {"flavorRef": "2"}}, "resize"), ({"migrate": None}, "migrate"),
    ({"rebuild": {"imageRef": "http://images.example/cirros.img"}}, "rebuild")])
def test_a_suspended_server_refuses_what_nova_refuses_with_novas_409(harness: Harness,
                                                                      body, action):
    uuid = active(harness)
    harness.action(uuid, {"suspend": None})
    harness.host_does(uuid)
    before = harness.store.revision
    answer = harness.action(uuid, body, roles=ADMIN, project="admin", user="root") \
        if action == "migrate" else harness.action(uuid, body)
    assert answer.status_int == 409, answer.json
    assert answer.json["conflictingRequest"]["message"] == \
        f"Cannot '{action}' instance {uuid} while it is in vm_state suspended"
    assert harness.store.revision == before


def test_resume_of_a_server_that_is_not_suspended_is_novas_409(harness: Harness):
    uuid = active(harness)
    before = harness.store.revision
    answer = harness.action(uuid, {"resume": None})
    assert answer.status_int == 409
    assert answer.json["conflictingRequest"]["message"] == \
        f"Cannot 'resume' instance {uuid} while it is in vm_state active"
    assert harness.store.revision == before
    harness.action(uuid, {"os-stop": None})
    harness.host_does(uuid)
    before = harness.store.revision
    answer = harness.action(uuid, {"suspend": None})
    assert answer.json["conflictingRequest"]["message"] == \
        f"Cannot 'suspend' instance {uuid} while it is in vm_state stopped"
    assert harness.store.revision == before


def test_a_suspended_server_is_deleted_and_its_hard_reboot_is_refused(harness: Harness):
    uuid = active(harness)
    harness.action(uuid, {"suspend": None})
    harness.host_does(uuid)
    # Nova's check lets a hard reboot through (its driver boots the guest afresh); our
    # host allows only resume from SUSPENDED, and says so (docs/reference/compute-api.md).
    before = harness.store.revision
    answer = harness.action(uuid, {"reboot": {"type": "HARD"}})
    assert answer.status_int == 409
    assert "is SUSPENDED: reboot is not allowed now (allowed: resume, snapshot, destroy)" \
        in answer.json["conflictingRequest"]["message"]
    assert harness.store.revision == before
    assert harness.call("DELETE", f"/v2.1/servers/{uuid}").status_int == 204


def test_suspend_and_resume_are_their_own_policies(harness: Harness):
    uuid = active(harness)
    answer = harness.action(uuid, {"suspend": None}, roles=("reader",))
    assert answer.status_int == 403
    assert "os_compute_api:os-suspend-server:suspend" in answer.json["forbidden"]["message"]
    assert harness.action(uuid, {"suspend": None}, project="p2").status_int == 404
    assert harness.action(uuid, {"suspend": {"x": 1}}).status_int == 202  # Nova: any value


def test_a_suspended_server_is_snapshotted_and_stays_suspended(harness: Harness):
    from tests.unit.api.objects.test_images import FakeGlance

    uuid = active(harness)
    harness.action(uuid, {"suspend": None})
    harness.host_does(uuid)
    harness.backend.images.glance = FakeGlance()
    answer = harness.action(uuid, {"createImage": {"name": "asleep"}}, version="2.45")
    assert answer.status_int == 202, answer.text
    assert states_of(harness.show(uuid)) == ("SUSPENDED", "suspended", "image_snapshot", 4)
    assert spec_of(harness, uuid)["action"] == "snapshot"
    harness.host_does(uuid)
    assert states_of(harness.show(uuid)) == ("SUSPENDED", "suspended", None, 4)


def paused(harness: Harness) -> str:
    """A server paused by its host."""
    uuid = active(harness)
    assert harness.action(uuid, {"pause": None}).status_int == 202
    harness.host_does(uuid)
    return uuid


def test_pause_shows_pausing_at_once_and_paused_once_done_then_unpause(harness: Harness):
    uuid = active(harness)
    answer = harness.action(uuid, {"pause": None})
    assert answer.status_int == 202 and answer.body == b""
    assert spec_of(harness, uuid)["action"] == "pause"
    assert states_of(harness.show(uuid)) == ("ACTIVE", "active", "pausing", 1)
    harness.host_does(uuid)
    # Nova: vm_state paused, the guest frozen in memory (power_state 3, PAUSED).
    assert states_of(harness.show(uuid)) == ("PAUSED", "paused", None, 3)
    assert harness.action(uuid, {"unpause": None}).status_int == 202
    assert spec_of(harness, uuid)["action"] == "unpause"
    assert states_of(harness.show(uuid)) == ("PAUSED", "paused", "unpausing", 3)
    harness.host_does(uuid)
    assert states_of(harness.show(uuid)) == ("ACTIVE", "active", None, 1)


@pytest.mark.parametrize(("body", "action"), [
    ({"os-start": None}, "start"), ({"os-stop": None}, "stop"),
    ({"reboot": {"type": "SOFT"}}, "reboot"), ({"suspend": None}, "suspend"),
    ({"resume": None}, "resume"), ({"pause": None}, "pause"),
    ({"resize": {"flavorRef": "2"}}, "resize"), ({"migrate": None}, "migrate"),
    ({"rebuild": {"imageRef": "http://images.example/cirros.img"}}, "rebuild")])
def test_a_paused_server_refuses_what_nova_refuses_with_novas_409(harness: Harness, body,
                                                                   action):
    uuid = paused(harness)
    before = harness.store.revision
    answer = harness.action(uuid, body, roles=ADMIN, project="admin", user="root") \
        if action == "migrate" else harness.action(uuid, body)
    assert answer.status_int == 409, answer.json
    assert answer.json["conflictingRequest"]["message"] == \
        f"Cannot '{action}' instance {uuid} while it is in vm_state paused"
    assert harness.store.revision == before


def test_unpause_of_a_server_that_is_not_paused_is_novas_409(harness: Harness):
    uuid = active(harness)
    before = harness.store.revision
    answer = harness.action(uuid, {"unpause": None})
    assert answer.status_int == 409
    assert answer.json["conflictingRequest"]["message"] == \
        f"Cannot 'unpause' instance {uuid} while it is in vm_state active"
    assert harness.store.revision == before
    harness.action(uuid, {"os-stop": None})
    harness.host_does(uuid)
    before = harness.store.revision
    for action in ("pause", "unpause"):
        answer = harness.action(uuid, {action: None})
        assert answer.json["conflictingRequest"]["message"] == \
            f"Cannot '{action}' instance {uuid} while it is in vm_state stopped"
    assert harness.store.revision == before


def test_pause_while_an_action_is_asked_is_novas_409_on_its_task_state(harness: Harness):
    uuid = active(harness)
    harness.action(uuid, {"os-stop": None})
    answer = harness.action(uuid, {"pause": None})
    assert answer.status_int == 409
    assert answer.json["conflictingRequest"]["message"] == \
        f"Cannot 'pause' instance {uuid} while it is in task_state powering-off"


def test_a_paused_server_is_rebooted_hard_as_novas_and_deleted(harness: Harness):
    uuid = paused(harness)
    assert harness.action(uuid, {"reboot": {"type": "HARD"}}).status_int == 202
    # Nova keeps vm_state paused until the reboot is done: status PAUSED meanwhile.
    assert states_of(harness.show(uuid)) == ("PAUSED", "paused", "rebooting_hard", 3)
    assert spec_of(harness, uuid)["request"]["hard"] is True
    harness.host_does(uuid)
    assert states_of(harness.show(uuid)) == ("ACTIVE", "active", None, 1)
    uuid = paused(harness)
    assert harness.call("DELETE", f"/v2.1/servers/{uuid}").status_int == 204


def test_a_paused_server_is_not_moved_live_here_and_says_why(harness: Harness):
    uuid, _source, _target = movable(harness)
    harness.action(uuid, {"pause": None})
    harness.host_does(uuid)
    before = harness.store.revision
    # Nova's check lets a paused server through (its live migration moves it paused); our
    # moves take no paused guest, and say so (docs/reference/compute-api.md).
    answer = harness.action(uuid, live("hv2"), roles=ADMIN, project="admin", user="root",
                            version="2.30")
    assert answer.status_int == 409, answer.text
    assert f"instance {uuid} is PAUSED: migrate is not allowed now" in \
        answer.json["conflictingRequest"]["message"]
    assert harness.store.revision == before


def test_pause_and_unpause_are_their_own_policies(harness: Harness):
    uuid = active(harness)
    answer = harness.action(uuid, {"pause": None}, roles=("reader",))
    assert answer.status_int == 403
    assert "os_compute_api:os-pause-server:pause" in answer.json["forbidden"]["message"]
    assert harness.action(uuid, {"pause": None}, project="p2").status_int == 404
    assert harness.action(uuid, {"pause": {"x": 1}}).status_int == 202  # Nova: any value
    harness.host_does(uuid)
    answer = harness.action(uuid, {"unpause": None}, roles=("reader",))
    assert "os_compute_api:os-pause-server:unpause" in answer.json["forbidden"]["message"]


def test_a_paused_server_is_snapshotted_and_stays_paused(harness: Harness):
    from tests.unit.api.objects.test_images import FakeGlance

    uuid = paused(harness)
    harness.backend.images.glance = FakeGlance()
    answer = harness.action(uuid, {"createImage": {"name": "frozen"}}, version="2.45")
    assert answer.status_int == 202, answer.text
    assert states_of(harness.show(uuid)) == ("PAUSED", "paused", "image_snapshot", 3)
    harness.host_does(uuid)
    assert spec_of(harness, uuid)["action"] == "snapshot"
    assert states_of(harness.show(uuid)) == ("PAUSED", "paused", None, 3)


def migrated_awaiting_confirm(harness: Harness) -> tuple[str, str, str]:
    """A server moved cold through the API's migrate, its guest defined on hv2: VERIFY_RESIZE."""
    from tests.unit.ops.test_migrations import defined_there

    uuid, source, target = movable(harness)
    answer = harness.action(uuid, {"migrate": None}, roles=ADMIN, project="admin",
                            user="root")
    assert answer.status_int == 202, answer.text
    assert spec_of(harness, uuid)["request"]["verify"] is True
    assert defined_there(harness.store, harness.placement, uuid, source,
                         target) == "await confirm"
    return uuid, source, target


def test_migrate_waits_in_verify_resize_then_its_confirm_hands_it_over(harness: Harness):
    uuid, source, target = migrated_awaiting_confirm(harness)
    shown = harness.show(uuid, version="2.47", roles=ADMIN, project="admin", user="root")
    assert states_of(shown) == ("VERIFY_RESIZE", "resized", None, 1)
    assert shown["OS-EXT-SRV-ATTR:host"] == "hv2"  # on its destination, as Nova's
    listed = harness.call("GET", "/v2.1/os-migrations", roles=ADMIN, project="admin",
                          user="root", version="2.23").json["migrations"]
    assert [(m["migration_type"], m["status"]) for m in listed] == [("migration", "finished")]
    hold = spec_of(harness, uuid)["request"]["migration"]
    assert set(harness.placement.get_allocations(hold)["allocations"]) == {source}
    assert harness.action(uuid, {"confirmResize": None}, roles=ADMIN, project="admin",
                          user="root").status_int == 204
    assert records.locate(harness.store, uuid)["host"] == target
    assert hold not in harness.placement.consumers
    assert states_of(harness.show(uuid, version="2.47")) == ("ACTIVE", "active", None, 1)
    listed = harness.call("GET", "/v2.1/os-migrations", roles=ADMIN, project="admin",
                          user="root", version="2.23").json["migrations"]
    assert [m["status"] for m in listed] == ["confirmed"]
    again = harness.action(uuid, {"confirmResize": None}, roles=ADMIN, project="admin",
                           user="root")
    assert again.status_int == 409 and "vm_state active" in again.text


def test_migrate_s_revert_answers_at_once_and_starts_it_after_the_destination_discards(
        harness: Harness):
    from etcd_compute.controller.migrations import MoveSteps
    from etcd_compute.instances import migrations as move_txn

    uuid, source, target = migrated_awaiting_confirm(harness)
    answer = harness.action(uuid, {"revertResize": None}, roles=ADMIN, project="admin",
                            user="root")
    assert answer.status_int == 202, answer.text
    assert records.locate(harness.store, uuid)["host"] == source
    assert set(harness.placement.get_allocations(uuid)["allocations"]) == {source}
    there = harness.store.read(messages.INSTANCE_SPEC,
                               harness.store.keys.spec(target, uuid))[0]
    assert there["request"]["cancel"].startswith("reverted by")
    # Nothing is started while the destination holds its copy: REVERT_RESIZE meanwhile.
    steps = MoveSteps(harness.store, harness.placement)
    assert steps.step(uuid) is None
    assert spec_of(harness, uuid)["action"] == "migrate"
    shown = harness.show(uuid, version="2.47")
    assert (shown["status"], shown["OS-EXT-STS:task_state"]) == ("REVERT_RESIZE",
                                                                 "resize_reverting")
    again = harness.action(uuid, {"os-start": None}, roles=ADMIN, project="admin",
                           user="root")
    assert again.status_int == 409, again.text
    # The destination discards: the controller asks the source to start, with the revert's
    # request; still reverting until the source runs it.
    entry = harness.store.get(harness.store.keys.spec(target, uuid))
    assert move_txn.discarded(harness.store, entry,
                              records.read_record(harness.store, target, uuid))
    assert steps.step(uuid) == "revert started"
    spec = spec_of(harness, uuid)
    assert spec["action"] == "start" and spec["request"]["by"] == "api:root@admin"
    assert harness.show(uuid, version="2.47")["OS-EXT-STS:task_state"] == "resize_reverting"
    harness.host_does(uuid)
    assert states_of(harness.show(uuid, version="2.47")) == ("ACTIVE", "active", None, 1)
    listed = harness.call("GET", "/v2.1/os-migrations", roles=ADMIN, project="admin",
                          user="root", version="2.23").json["migrations"]
    assert [m["status"] for m in listed] == ["reverted"]


def test_a_server_deleted_in_verify_resize_after_migrate_is_destroyed_where_it_landed(
        harness: Harness):
    from etcd_compute.controller.migrations import MoveSteps

    uuid, _source, target = migrated_awaiting_confirm(harness)
    assert harness.call("DELETE", f"/v2.1/servers/{uuid}").status_int == 204
    assert MoveSteps(harness.store, harness.placement).step(uuid) == "handed over"
    there = harness.store.read(messages.INSTANCE_SPEC,
                               harness.store.keys.spec(target, uuid))[0]
    assert there["action"] == "destroy"

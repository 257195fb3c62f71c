"""os-instance-actions: a server's actions from its events, newest first, Nova's names,
who asked through the API, events (and their details for admins), paging from 2.58."""

from __future__ import annotations

from tests.unit.api.harness import ADMIN, Harness


def stopped(harness: Harness) -> str:
    uuid = harness.boot()
    harness.activate(uuid)
    harness.action(uuid, {"os-stop": None})
    harness.host_does(uuid, error="the guest would not stop")
    harness.action(uuid, {"os-stop": None})
    harness.host_does(uuid)
    return uuid


def test_actions_are_listed_newest_first_with_novas_names(harness: Harness):
    uuid = stopped(harness)
    answer = harness.call("GET", f"/v2.1/servers/{uuid}/os-instance-actions")
    actions = answer.json["instanceActions"]
    assert [a["action"] for a in actions] == ["stop", "stop", "create"]
    assert [a["message"] for a in actions] == [None, "Error", None]
    assert all(a["request_id"].startswith("req-") for a in actions)
    assert {(a["user_id"], a["project_id"]) for a in actions} == {("u1", "p1")}
    assert set(actions[0]) == {"action", "instance_uuid", "request_id", "user_id",
                               "project_id", "start_time", "message"}
    assert "updated_at" in harness.call("GET", f"/v2.1/servers/{uuid}/os-instance-actions",
                                        version="2.58").json["instanceActions"][0]


def test_an_action_shows_its_event_and_admins_see_the_details(harness: Harness):
    uuid = stopped(harness)
    failed = harness.call("GET", f"/v2.1/servers/{uuid}/os-instance-actions").json[
        "instanceActions"][1]
    path = f"/v2.1/servers/{uuid}/os-instance-actions/{failed['request_id']}"
    old = harness.call("GET", path).json["instanceAction"]
    assert "events" not in old  # before 2.51 a member sees no events
    shown = harness.call("GET", path, version="2.62").json["instanceAction"]
    (event,) = shown["events"]
    assert (event["event"], event["result"]) == ("compute_stop_instance", "Error")
    assert "traceback" not in event and "host" not in event and event["hostId"]
    admin = harness.admin("GET", path, version="2.62").json["instanceAction"]["events"][0]
    assert admin["traceback"] == "the guest would not stop" and admin["host"] == "hv1"
    assert "details" not in admin
    admin = harness.admin("GET", path, version="2.84").json["instanceAction"]["events"][0]
    assert admin["details"] == "the guest would not stop"
    member = harness.call("GET", path, version="2.84").json["instanceAction"]["events"][0]
    assert "details" not in member
    missing = harness.call("GET", f"/v2.1/servers/{uuid}/os-instance-actions/req-nope")
    assert missing.status_int == 404
    assert missing.json["itemNotFound"]["message"] == "Action req-nope not found"


def test_paging_and_time_filters_from_2_58(harness: Harness):
    uuid = stopped(harness)
    path = f"/v2.1/servers/{uuid}/os-instance-actions"
    first = harness.call("GET", path + "?limit=2", version="2.58").json
    assert len(first["instanceActions"]) == 2 and first["links"][0]["rel"] == "next"
    marker = first["instanceActions"][-1]["request_id"]
    rest = harness.call("GET", f"{path}?marker={marker}", version="2.58").json
    assert [a["action"] for a in rest["instanceActions"]] == ["create"]
    assert harness.call("GET", path + "?changes-since=2999-01-01T00:00:00Z",
                        version="2.58").json["instanceActions"] == []
    assert harness.call("GET", path + "?foo=1", version="2.58").status_int == 400
    assert harness.call("GET", path + "?foo=1").status_int == 200  # before 2.58: ignored


def test_another_projects_server_is_404(harness: Harness):
    uuid = stopped(harness)
    assert harness.call("GET", f"/v2.1/servers/{uuid}/os-instance-actions",
                        project="p2").status_int == 404
    assert harness.call("GET", f"/v2.1/servers/{uuid}/os-instance-actions", roles=ADMIN,
                        project="admin", user="root").status_int == 200


def test_a_deleted_servers_actions_are_listed_from_2_21(harness: Harness):
    uuid = harness.boot()
    harness.activate(uuid)
    harness.call("DELETE", f"/v2.1/servers/{uuid}")
    from etcd_compute import messages
    from etcd_compute.instances import host as host_txns
    from etcd_compute.instances import records

    host = records.locate(harness.store, uuid)["host"]
    spec = messages.decode(messages.INSTANCE_SPEC,
                           harness.store.get(harness.store.keys.spec(host, uuid)).value)
    host_txns.mark_deleting(harness.store, spec, records.read_record(harness.store, host, uuid))
    host_txns.delete(harness.store, spec, records.read_record(harness.store, host, uuid),
                     ttl=60)
    path = f"/v2.1/servers/{uuid}/os-instance-actions"
    assert harness.call("GET", path, version="2.20").status_int == 404
    actions = harness.call("GET", path, version="2.21").json["instanceActions"]
    assert [a["action"] for a in actions] == ["delete", "create"]


def test_an_action_is_found_by_the_request_id_its_answer_gave(harness: Harness):
    """Nova's context.request_id: one id per request, in the answer's X-Compute-Request-ID
    and in the instance action it started (Tempest shows a create's action by it)."""
    created = harness.call("POST", "/v2.1/servers", {"server": {
        "name": "web", "flavorRef": "1", "imageRef": "file:///dev/null"}})
    uuid, made = created.json["server"]["id"], created.headers["X-Compute-Request-ID"]
    assert made == created.headers["X-OpenStack-Request-ID"]
    harness.activate(uuid)
    path = f"/v2.1/servers/{uuid}/os-instance-actions"
    shown = harness.call("GET", f"{path}/{made}")
    assert shown.status_int == 200, shown.text
    assert (shown.json["instanceAction"]["action"],
            shown.json["instanceAction"]["request_id"]) == ("create", made)
    stop = harness.action(uuid, {"os-stop": None})
    harness.host_does(uuid)
    stopped = stop.headers["X-Compute-Request-ID"]
    assert stopped != made
    listed = harness.call("GET", path).json["instanceActions"]
    assert [(a["action"], a["request_id"]) for a in listed] == [("stop", stopped),
                                                                ("create", made)]

"""Remote consoles as Nova answers them: POST /servers/{id}/remote-consoles (2.6+) and the
old os-get*Console actions (2.1-2.5): a novnc URL with a single-use token for an owner or
an admin; Nova's errors for the rest."""

from __future__ import annotations

from urllib import parse

import pytest

from etcd_compute import messages, remote_consoles
from etcd_compute.hosts import publish_console_address
from etcd_compute.instances import records
from tests.unit.api.harness import Harness, active


def relayed(harness: Harness, uuid: str) -> str:
    """The server's host publishes a console relay (a libvirt host with console.listen)."""
    host = records.locate(harness.store, uuid)["host"]
    publish_console_address(harness.store, host, "192.0.2.10:6081")
    return host


def remote(harness: Harness, uuid: str, protocol: str = "vnc", console_type: str = "novnc",
           version: str = "2.6", **kwargs):
    return harness.call("POST", f"/v2.1/servers/{uuid}/remote-consoles",
                        {"remote_console": {"protocol": protocol, "type": console_type}},
                        version=version, **kwargs)


def token_of(url: str) -> str:
    path = parse.parse_qs(parse.urlsplit(url).query)["path"][0]
    return parse.parse_qs(parse.urlsplit(path).query)["token"][0]


def test_an_owner_gets_a_novnc_url_whose_token_opens_that_server_once(harness: Harness):
    uuid = active(harness)
    relayed(harness, uuid)
    answer = remote(harness, uuid)
    assert answer.status_int == 200, answer.text
    console = answer.json["remote_console"]
    assert (console["protocol"], console["type"]) == ("vnc", "novnc")
    assert console["url"].startswith("http://127.0.0.1:6080/vnc_lite.html?path=%3Ftoken%3D")
    token = token_of(console["url"])
    # etcd holds the token's hash only, with a lease.
    stored = harness.store.get(harness.store.keys.console_token(remote_consoles.digest(token)))
    assert stored is not None and stored.lease in harness.store.leases
    assert token.encode() not in stored.value
    assert messages.decode(messages.CONSOLE_TOKEN, stored.value)["instance_uuid"] == uuid
    assert harness.store.leases[stored.lease] == 600
    assert remote_consoles.consume(harness.store, token).instance_uuid == uuid
    with pytest.raises(remote_consoles.TokenRefused):
        remote_consoles.consume(harness.store, token)


def test_the_old_vnc_action_answers_a_console_until_2_5_and_404_after(harness: Harness):
    uuid = active(harness)
    relayed(harness, uuid)
    answer = harness.action(uuid, {"os-getVNCConsole": {"type": "novnc"}})
    assert answer.status_int == 200, answer.text
    assert answer.json["console"]["type"] == "novnc"
    assert "token%3D" in answer.json["console"]["url"]
    assert harness.action(uuid, {"os-getVNCConsole": {"type": "novnc"}},
                          version="2.5").status_int == 200
    answer = harness.action(uuid, {"os-getVNCConsole": {"type": "novnc"}}, version="2.6")
    assert answer.status_int == 404
    assert remote(harness, uuid, version="2.5").status_int == 404


def test_another_projects_server_is_404_and_an_admin_gets_its_console(harness: Harness):
    uuid = active(harness)
    relayed(harness, uuid)
    answer = remote(harness, uuid, project="p2")
    assert answer.status_int == 404
    assert answer.json["itemNotFound"]["message"] == f"Instance {uuid} could not be found."
    answer = harness.action(uuid, {"os-getVNCConsole": {"type": "novnc"}}, project="p2")
    assert answer.status_int == 404
    assert remote(harness, uuid, roles=("admin", "member", "reader"), project="admin",
                  user="root").status_int == 200


def test_a_reader_may_not_open_a_console(harness: Harness):
    uuid = active(harness)
    relayed(harness, uuid)
    answer = remote(harness, uuid, roles=("reader",))
    assert answer.status_int == 403
    assert "os_compute_api:os-remote-consoles" in answer.json["forbidden"]["message"]
    answer = harness.action(uuid, {"os-getVNCConsole": {"type": "novnc"}}, roles=("reader",))
    assert answer.status_int == 403


@pytest.mark.parametrize(("protocol", "console_type", "message"), [
    ("spice", "spice-html5", "Unavailable console type spice-html5."),
    ("serial", "serial", "Unavailable console type serial."),
    ("rdp", "rdp-html5", "Unavailable console type rdp."),
    ("vnc", "xvpvnc", "Invalid console type xvpvnc"),
    ("vnc", "serial", "Invalid console type serial"),
])
def test_consoles_we_do_not_serve_are_novas_400s(harness: Harness, protocol: str,
                                                 console_type: str, message: str):
    uuid = active(harness)
    relayed(harness, uuid)
    answer = remote(harness, uuid, protocol, console_type)
    assert answer.status_int == 400
    assert answer.json["badRequest"]["message"] == message


def test_mks_is_in_the_schema_from_2_8_only(harness: Harness):
    uuid = active(harness)
    relayed(harness, uuid)
    assert remote(harness, uuid, "mks", "webmks", version="2.7").status_int == 400
    answer = remote(harness, uuid, "mks", "webmks", version="2.8")
    assert answer.json["badRequest"]["message"] == "Unavailable console type webmks."


def test_the_old_actions_we_do_not_serve_answer_as_nova(harness: Harness):
    uuid = active(harness)
    relayed(harness, uuid)
    answer = harness.action(uuid, {"os-getSPICEConsole": {"type": "spice-html5"}})
    assert answer.json["badRequest"]["message"] == "Unavailable console type spice-html5."
    answer = harness.action(uuid, {"os-getSerialConsole": {"type": "serial"}})
    assert answer.json["badRequest"]["message"] == "Unavailable console type serial."
    answer = harness.action(uuid, {"os-getRDPConsole": {"type": "rdp-html5"}})
    assert answer.status_int == 400
    assert answer.json["badRequest"]["message"].startswith("The server could not comply")
    answer = harness.action(uuid, {"os-getVNCConsole": {"type": "spice-html5"}})
    assert answer.status_int == 400
    assert "Invalid input for field/attribute type" in answer.json["badRequest"]["message"]
    assert harness.action(uuid, {"os-getVNCConsole": {}}).status_int == 400


def test_a_host_without_a_relay_says_the_console_type_is_unavailable(harness: Harness):
    uuid = active(harness)  # the fake driver's host publishes no console relay
    answer = remote(harness, uuid)
    assert answer.status_int == 400
    assert answer.json["badRequest"]["message"] == "Unavailable console type novnc."
    assert not harness.store.get_prefix(harness.store.keys.console_tokens())[0]


def test_a_server_still_building_is_409_not_ready(harness: Harness):
    uuid = harness.boot()
    relayed(harness, uuid)
    answer = remote(harness, uuid)
    assert answer.status_int == 409
    assert answer.json["conflictingRequest"]["message"] == f"Instance {uuid} is not ready"
    answer = harness.action(uuid, {"os-getVNCConsole": {"type": "novnc"}})
    assert answer.status_int == 409


def test_a_server_being_deleted_is_refused_as_nova(harness: Harness):
    uuid = active(harness)
    relayed(harness, uuid)
    assert harness.call("DELETE", f"/v2.1/servers/{uuid}").status_int == 204
    answer = harness.action(uuid, {"os-getVNCConsole": {"type": "novnc"}})
    assert answer.status_int == 409
    assert answer.json["conflictingRequest"]["message"] == (
        f"Cannot 'get_vnc_console' instance {uuid} while it is in task_state deleting")
    answer = remote(harness, uuid)
    assert answer.status_int == 400
    assert answer.json["badRequest"]["message"] == (
        f"Instance {uuid} in task_state deleting. Cannot get_vnc_console while the instance "
        "is in this state.")


def test_the_ttl_is_the_setting(harness: Harness):
    harness.backend.config["console"] = {**harness.backend.config["console"],
                                         "token_ttl_seconds": 30}
    uuid = active(harness)
    relayed(harness, uuid)
    token = token_of(remote(harness, uuid).json["remote_console"]["url"])
    stored = harness.store.get(harness.store.keys.console_token(remote_consoles.digest(token)))
    assert harness.store.leases[stored.lease] == 30

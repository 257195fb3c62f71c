"""os-server-external-events: the service role's; each event for a server we have is
accepted (200), one for a server we do not have 404; all refused 404, some 207."""

from __future__ import annotations

from tests.unit.api.harness import Harness

MISSING = "0b5d6c43-43f6-4c1e-9f8b-6c5a8a6f2a11"


def test_events_are_accepted_per_server():
    harness = Harness.new()
    harness.add_host()
    harness.add_flavor()
    uuid = harness.boot()
    harness.activate(uuid)

    def send(*servers: str, roles=("service",)):
        return harness.call("POST", "/v2.1/os-server-external-events", {"events": [
            {"name": "network-changed", "server_uuid": s} for s in servers]},
            roles=roles, project="service")

    answer = send(uuid)
    assert answer.status_int == 200
    assert answer.json["events"] == [{"name": "network-changed", "server_uuid": uuid,
                                      "status": "completed", "code": 200}]
    some = send(uuid, MISSING)
    assert some.status_int == 207
    assert [(e["code"], e["status"]) for e in some.json["events"]] == [
        (200, "completed"), (404, "failed")]
    assert send(MISSING).status_int == 404
    assert send(uuid, roles=("member", "reader")).status_int == 403
    refused = harness.call("POST", "/v2.1/os-server-external-events", {"events": [
        {"name": "power-update", "server_uuid": uuid}]}, roles=("service",))
    assert refused.status_int == 400  # from 2.76 only

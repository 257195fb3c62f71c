"""os-services: compute hosts as nova-compute services (admins), disable with a reason as
`schedule.py host disable` does, the legacy routes before 2.53, forced_down refused."""

from __future__ import annotations

import pytest

from etcd_compute import hosts
from etcd_compute.placement import DISABLED_TRAIT
from tests.unit.api.harness import Harness


@pytest.fixture
def harness() -> Harness:
    harness = Harness.new()
    harness.up = harness.add_host("hv1")
    harness.down = harness.add_host("hv2", alive=False)
    return harness


def test_admins_list_the_compute_hosts_as_services(harness: Harness):
    services = harness.admin("GET", "/v2.1/os-services", version="2.53").json["services"]
    assert [(s["host"], s["state"], s["status"], s["id"]) for s in services] == [
        ("hv1", "up", "enabled", harness.up), ("hv2", "down", "enabled", harness.down)]
    assert services[0]["binary"] == "nova-compute" and services[0]["zone"] == "nova"
    assert services[0]["forced_down"] is False and services[0]["updated_at"]
    old = harness.admin("GET", "/v2.1/os-services?host=hv2").json["services"]
    assert len(old) == 1 and isinstance(old[0]["id"], int) and "forced_down" not in old[0]
    assert harness.call("GET", "/v2.1/os-services").status_int == 403


def test_disable_with_a_reason_is_a_host_disable_and_enable_undoes_it(harness: Harness):
    answer = harness.admin("PUT", f"/v2.1/os-services/{harness.up}",
                           {"status": "disabled", "disabled_reason": "disk swap"},
                           version="2.53")
    assert answer.status_int == 200, answer.text
    assert (answer.json["service"]["status"], answer.json["service"]["disabled_reason"]) == (
        "disabled", "disk swap")
    assert DISABLED_TRAIT in harness.placement.get_traits(harness.up)
    note = hosts.maintenance(harness.store, harness.up)
    assert note["reason"] == "disk swap" and note["by"] == "api:root@admin"
    answer = harness.admin("PUT", f"/v2.1/os-services/{harness.up}", {"status": "enabled"},
                           version="2.53")
    assert answer.json["service"]["status"] == "enabled"
    assert DISABLED_TRAIT not in harness.placement.get_traits(harness.up)
    assert hosts.maintenance(harness.store, harness.up) is None


def test_the_routes_before_2_53_name_host_and_binary(harness: Harness):
    body = {"host": "hv1", "binary": "nova-compute", "disabled_reason": "why"}
    answer = harness.admin("PUT", "/v2.1/os-services/disable-log-reason", body)
    assert answer.json == {"service": {"host": "hv1", "binary": "nova-compute",
                                       "status": "disabled", "disabled_reason": "why"}}
    answer = harness.admin("PUT", "/v2.1/os-services/enable",
                           {"host": "hv1", "binary": "nova-compute"})
    assert answer.json["service"]["status"] == "enabled"
    assert harness.admin("PUT", "/v2.1/os-services/frobnicate",
                         {"host": "hv1", "binary": "nova-compute"}).status_int == 404
    answer = harness.admin("PUT", "/v2.1/os-services/disable",
                           {"host": "hv1", "binary": "nova-scheduler"})
    assert answer.status_int == 400 and "Only nova-compute" in answer.json["badRequest"][
        "message"]


@pytest.mark.parametrize(("body", "fragment"), [
    ({"forced_down": True}, "forced_down is not supported here"),
    ({"status": "enabled", "disabled_reason": "x"}, "with status 'enabled' is invalid"),
    ({}, "No updates were requested"),
    ({"status": "sleeping"}, "Invalid input"),
])
def test_updates_refused(harness: Harness, body, fragment):
    answer = harness.admin("PUT", f"/v2.1/os-services/{harness.up}", body, version="2.53")
    assert answer.status_int == 400 and fragment in answer.json["badRequest"]["message"]
    assert DISABLED_TRAIT not in harness.placement.get_traits(harness.up)


def test_a_host_with_instances_is_not_deleted_one_without_is(harness: Harness):
    harness.add_flavor()
    harness.boot()  # on hv1: hv2 is down
    busy = harness.admin("DELETE", f"/v2.1/os-services/{harness.up}", version="2.53")
    assert busy.status_int == 409 and "hosting instances" in busy.json[
        "conflictingRequest"]["message"]
    assert harness.admin("DELETE", f"/v2.1/os-services/{harness.down}",
                         version="2.53").status_int == 204
    assert harness.placement.get_provider(harness.down) is None
    assert harness.admin("DELETE", "/v2.1/os-services/not-a-uuid",
                         version="2.53").status_int == 400

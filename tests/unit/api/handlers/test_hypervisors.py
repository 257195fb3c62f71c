"""os-hypervisors: sizes and use from Placement, state from the heartbeat, status from a
disable, statistics; the routes and ids of each microversion."""

from __future__ import annotations

import pytest

from tests.unit.api.harness import Harness


@pytest.fixture
def harness() -> Harness:
    harness = Harness.new()
    harness.up = harness.add_host("hv1", vcpus=8, ram=4096, disk=100)
    harness.down = harness.add_host("hv2", alive=False)
    harness.add_flavor()
    return harness


def test_the_list_and_the_detail(harness: Harness):
    listed = harness.admin("GET", "/v2.1/os-hypervisors", version="2.53").json["hypervisors"]
    assert [(h["hypervisor_hostname"], h["state"], h["status"]) for h in listed] == [
        ("hv1", "up", "enabled"), ("hv2", "down", "enabled")]
    uuid = harness.boot()
    detail = harness.admin("GET", f"/v2.1/os-hypervisors/{listed[0]['id']}",
                           version="2.53").json["hypervisor"]
    assert (detail["vcpus"], detail["memory_mb"], detail["local_gb"]) == (8, 4096, 100)
    # The server went here (the other host is down).
    assert (detail["running_vms"], detail["vcpus_used"], detail["memory_mb_used"],
            detail["free_ram_mb"]) == (1, 1, 256, 3840)
    assert detail["service"]["host"] == "hv1" and detail["cpu_info"] == {}
    with_servers = harness.admin("GET", "/v2.1/os-hypervisors/detail?with_servers=true",
                                 version="2.75").json["hypervisors"]
    assert sorted(s["uuid"] for h in with_servers for s in h["servers"]) == [uuid]
    assert harness.call("GET", "/v2.1/os-hypervisors").status_int == 403


def test_statistics_sum_every_hypervisor(harness: Harness):
    stats = harness.admin("GET", "/v2.1/os-hypervisors/statistics").json[
        "hypervisor_statistics"]
    assert (stats["count"], stats["vcpus"], stats["memory_mb"]) == (2, 24, 20480)


def test_ids_and_routes_per_microversion(harness: Harness):
    old = harness.admin("GET", "/v2.1/os-hypervisors").json["hypervisors"]
    assert all(isinstance(h["id"], int) for h in old)
    assert harness.admin("GET", f"/v2.1/os-hypervisors/{old[0]['id']}").status_int == 200
    assert harness.admin("GET", "/v2.1/os-hypervisors/nope").status_int == 404
    assert harness.admin("GET", "/v2.1/os-hypervisors/nope", version="2.53").status_int == 400
    found = harness.admin("GET", "/v2.1/os-hypervisors/hv/search").json["hypervisors"]
    assert len(found) == 2
    assert harness.admin("GET", "/v2.1/os-hypervisors/xx/search").status_int == 404
    assert harness.admin("GET", "/v2.1/os-hypervisors/hv/search",
                         version="2.53").status_int == 404
    pattern = harness.admin("GET", "/v2.1/os-hypervisors?hypervisor_hostname_pattern=hv2",
                            version="2.53").json["hypervisors"]
    assert [h["hypervisor_hostname"] for h in pattern] == ["hv2"]
    page = harness.admin("GET", "/v2.1/os-hypervisors?limit=1", version="2.53").json
    assert len(page["hypervisors"]) == 1 and page["hypervisors_links"][0]["rel"] == "next"
    # A heartbeat without the machine's start (a compute of before): Nova's 501.
    uptime = harness.admin("GET", f"/v2.1/os-hypervisors/{harness.up}/uptime",
                           version="2.53")
    assert uptime.status_int == 501


def test_uptime_is_since_the_hosts_machine_started(harness: Harness):
    import time

    from etcd_compute import hosts

    hosts.beat(harness.store, None, harness.up, "hv1", "fake")
    booted = hosts.heartbeat(harness.store, harness.up)["booted_at"]
    shown = harness.admin("GET", f"/v2.1/os-hypervisors/{harness.up}/uptime",
                          version="2.53").json["hypervisor"]
    assert (shown["id"], shown["hypervisor_hostname"], shown["state"]) == (
        harness.up, "hv1", "up")
    days = int((time.time() - booted) // 86400)
    assert f" up {days} day" in shown["uptime"] if days else " up " in shown["uptime"]
    assert harness.call("GET", f"/v2.1/os-hypervisors/{harness.up}/uptime").status_int == 403

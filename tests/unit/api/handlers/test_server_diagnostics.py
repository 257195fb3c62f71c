"""GET /servers/{id}/diagnostics: what the host published with the console, in Nova's 2.48
shape (uptime from the launch) or the flat one before; admins only; 409 when not running
or nothing is published."""

from __future__ import annotations

import time
import uuid as uuidlib

from etcd_compute import messages
from etcd_compute.drivers.fake import fake_diagnostics
from etcd_compute.instances import records
from tests.unit.api.harness import Harness


def published(harness: Harness) -> str:
    uuid = harness.boot()
    harness.activate(uuid)
    host = records.locate(harness.store, uuid)["host"]
    harness.store.put(messages.CONSOLE, harness.store.keys.console(host, uuid), {
        "uuid": uuid, "text": "boot\n", "updated_at": time.time(),
        "diagnostics": fake_diagnostics({"resources": {"VCPU": 2, "MEMORY_MB": 256}})})
    return uuid


def diagnostics(harness: Harness, uuid: str, version: str = "2.48", **kwargs):
    return harness.admin("GET", f"/v2.1/servers/{uuid}/diagnostics", version=version,
                         **kwargs)


def test_an_admin_sees_novas_2_48_diagnostics_with_the_uptime_since_launch(harness: Harness):
    uuid = published(harness)
    answer = diagnostics(harness, uuid)
    assert answer.status_int == 200, answer.text
    found = answer.json
    assert (found["state"], found["driver"], found["num_cpus"]) == ("running", "libvirt", 2)
    assert found["memory_details"] == {"maximum": 256, "used": 0}
    assert isinstance(found["uptime"], int) and 0 <= found["uptime"] < 60


def test_before_2_48_the_figures_are_a_flat_dictionary(harness: Harness):
    found = diagnostics(harness, published(harness), version="2.47").json
    assert found["cpu0_time"] == 0 and found["cpu1_time"] == 0
    assert found["memory"] == 256 * 1024 and found["disk0_read"] == 0
    assert "nic0_rx_octets" in found and "uptime" in found


def test_diagnostics_are_for_admins_and_of_a_running_server(harness: Harness):
    uuid = published(harness)
    answer = harness.call("GET", f"/v2.1/servers/{uuid}/diagnostics")
    assert answer.status_int == 403
    assert "os_compute_api:os-server-diagnostics" in answer.json["forbidden"]["message"]
    assert diagnostics(harness, str(uuidlib.uuid4())).status_int == 404
    harness.action(uuid, {"os-stop": None})
    harness.host_does(uuid)
    answer = diagnostics(harness, uuid)
    assert answer.status_int == 409
    assert answer.json["conflictingRequest"]["message"] == (
        f"Instance {uuid} in power state 4. Cannot get_diagnostics while the instance is "
        "in this state.")


def test_nothing_published_yet_is_409(harness: Harness):
    uuid = harness.boot()
    assert diagnostics(harness, uuid).status_int == 409  # building
    harness.activate(uuid)
    answer = diagnostics(harness, uuid)
    assert answer.status_int == 409 and "no diagnostics" in answer.json[
        "conflictingRequest"]["message"]

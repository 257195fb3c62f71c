"""Nova's lock, os-resetState, restore/forceDelete, createBackup, diagnostics, networks none
and a console of several lines, through the real API (openstacksdk and raw requests),
Keystone, Glance and a fake-driver compute; nothing left in Placement after."""

from __future__ import annotations

import json
import uuid as uuidlib
from typing import Any

import pytest

from etcd_compute.instances import records
from tests.api.conftest import IMAGE, Cloud
from tests.api.test_server_actions import boot, settle
from tests.support import wait_for


def action(cloud: Cloud, user: str, server_id: str, body: Any,
           version: str = "2.1") -> Any:
    return cloud.session(user).post(
        f"{cloud.api.endpoint}/servers/{server_id}/action", data=json.dumps(body),
        headers={"Content-Type": "application/json",
                 "OpenStack-API-Version": f"compute {version}"}, raise_exc=False)


def spec_revision(cloud: Cloud, server_id: str) -> int:
    """The revision of what the server's host is asked to hold (changed by any action)."""
    host = records.locate(cloud.store, server_id)["host"]
    return int(cloud.store.get(cloud.store.keys.spec(host, server_id)).mod_revision)


def guest(cloud: Cloud, server_id: str) -> dict[str, Any]:
    """The fake hypervisor's file of the guest (compute's state_dir, beside compute.log)."""
    path = cloud.compute.log_path.parent / "state" / "fake-instances" / f"{server_id}.json"
    return dict(json.loads(path.read_text()))


def delete(conn: Any, server: Any) -> None:
    conn.compute.delete_server(server)
    conn.compute.wait_for_delete(server, wait=60, interval=0.3)


def test_a_locked_server_refuses_its_members_actions_until_unlocked(cloud: Cloud) -> None:
    import openstack.exceptions

    demo = cloud.connect("demo")
    server = boot(demo, "locked")
    try:
        answer = action(cloud, "demo", server.id, {"lock": {"locked_reason": "backup"}},
                        version="2.73")
        assert answer.status_code == 202, answer.text
        shown = demo.compute.get_server(server.id)
        assert shown.is_locked is True
        answer = cloud.session("demo").get(f"{cloud.api.endpoint}/servers/{server.id}",
                                           headers={"OpenStack-API-Version": "compute 2.73"})
        assert answer.json()["server"]["locked_reason"] == "backup"
        with pytest.raises(openstack.exceptions.ConflictException, match="is locked"):
            demo.compute.stop_server(server)
        with pytest.raises(openstack.exceptions.ConflictException, match="is locked"):
            demo.compute.delete_server(server)
        demo.compute.unlock_server(server)
        demo.compute.stop_server(server)
        settle(cloud, demo, server, "SHUTOFF")
    finally:
        delete(demo, server)
    wait_for(lambda: not cloud.usage("demo"), timeout=30, what="the claim freed")


def test_reset_state_shows_error_and_a_rebuild_brings_it_back(cloud: Cloud) -> None:
    admin, demo = cloud.connect("admin"), cloud.connect("demo")
    server = boot(demo, "reset")
    try:
        spec = spec_revision(cloud, server.id)
        admin.compute.reset_server_state(server, "error")
        shown = demo.compute.get_server(server.id)
        assert (shown.status, shown.vm_state, shown.task_state) == ("ERROR", "error", None)
        assert action(cloud, "demo", server.id,
                      {"os-resetState": {"state": "active"}}).status_code == 403
        # Only the API's view changed: nothing was asked of the host (its spec is as it
        # was), and the guest still runs there.
        assert spec_revision(cloud, server.id) == spec
        assert guest(cloud, server.id)["running"] is True
        demo.compute.rebuild_server(server, image=IMAGE)
        settle(cloud, demo, server, "ACTIVE")
        for name in ("restore", "forceDelete"):
            answer = action(cloud, "demo", server.id, {name: None})
            assert answer.status_code == 409
            assert answer.json()["conflictingRequest"]["message"] == (
                f"Cannot '{name}' instance {server.id} while it is in vm_state active")
        assert action(cloud, "demo", str(uuidlib.uuid4()),
                      {"forceDelete": None}).status_code == 404
    finally:
        delete(demo, server)


def test_diagnostics_and_a_console_of_several_lines_of_a_running_server(cloud: Cloud) -> None:
    import openstack.exceptions

    admin, demo = cloud.connect("admin"), cloud.connect("demo")
    server = boot(demo, "diagnosed")
    try:
        def published() -> Any:
            answer = cloud.session("admin").get(
                f"{cloud.api.endpoint}/servers/{server.id}/diagnostics",
                headers={"OpenStack-API-Version": "compute 2.48"}, raise_exc=False)
            return answer.json() if answer.status_code == 200 else None

        found = wait_for(published, timeout=30, what="the diagnostics published")
        assert (found["state"], found["num_cpus"]) == ("running", 1)
        assert found["memory_details"]["maximum"] == 256 and found["uptime"] >= 0
        with pytest.raises(openstack.exceptions.ForbiddenException):
            demo.compute.get_server_diagnostics(server)
        # openstacksdk reads the same diagnostics (it answers an object even for an empty body).
        diagnostics = admin.compute.get_server_diagnostics(server)
        assert (diagnostics.state, diagnostics.num_cpus, diagnostics.memory_details) == (
            "running", 1, found["memory_details"])
        output = demo.compute.get_server_console_output(server)["output"]
        assert len(output.splitlines()) > 3 and server.id in output
    finally:
        delete(demo, server)


def test_a_server_without_a_network_has_no_address(cloud: Cloud) -> None:
    session = cloud.session("demo")
    answer = session.post(f"{cloud.api.endpoint}/servers", data=json.dumps({"server": {
        "name": "unplugged", "flavorRef": "1", "imageRef": IMAGE, "networks": "none"}}),
        headers={"Content-Type": "application/json",
                 "OpenStack-API-Version": "compute 2.37"})
    assert answer.status_code == 202, answer.text
    demo = cloud.connect("demo")
    server = demo.compute.wait_for_server(demo.compute.get_server(
        answer.json()["server"]["id"]), status="ACTIVE", wait=60, interval=0.3)
    try:
        assert server.addresses == {}
    finally:
        delete(demo, server)


def test_backups_rotate_in_glance_as_novas(cloud: Cloud, glance_section: dict) -> None:
    from etcd_compute.glance import GlanceClient

    glance = GlanceClient(glance_section)
    demo = cloud.connect("demo")
    server = boot(demo, "backed-up")
    made: list[str] = []
    try:
        for name in ("b1", "b2", "b3"):
            answer = action(cloud, "demo", server.id, {"createBackup": {
                "name": name, "backup_type": "daily", "rotation": 2}}, version="2.45")
            assert answer.status_code == 202, answer.text
            made.append(answer.json()["image_id"])
            wait_for(lambda i=made[-1]: glance.get(i)["status"] == "active", timeout=120,
                     what=f"backup {name} uploaded")
            settle(cloud, demo, server, "ACTIVE")

        def kept() -> list[str]:
            return sorted(i["name"] for i in glance.list(instance_uuid=server.id,
                                                         image_type="backup"))

        wait_for(lambda: kept() == ["b2", "b3"], timeout=30, what="the oldest rotated away")
        image = glance.get(made[-1])
        assert (image["backup_type"], image["owner"]) == ("daily", cloud.project_id("demo"))
    finally:
        delete(demo, server)
        for image_id in made:
            try:
                glance.delete(image_id)
            except Exception:  # noqa: BLE001 (rotated away already)
                pass

"""Servers: views joined with their instances in two reads, ended ones forgotten, a failed
create's view kept alone, writes compared."""

from __future__ import annotations

import time
import uuid as uuidlib

import pytest

from etcd_compute import messages
from etcd_compute.api.objects.servers import ServerChanged, Servers
from etcd_compute.instances import records, states
from tests.unit.api.harness import Harness


def view(uuid: str, project: str = "p1", **more) -> dict:
    now = time.time()
    return {"uuid": uuid, "project_id": project, "user_id": "u1", "name": "s",
            "created_at": now, "updated_at": now, **more}


def test_views_join_their_instances_and_ended_ones_go():
    harness = Harness.new()
    harness.add_host()
    harness.add_flavor()
    live, ended = harness.boot("live"), harness.boot("ended")
    host = records.locate(harness.store, ended)["host"]
    harness.store.delete(harness.store.keys.record(host, ended))
    harness.store.delete(harness.store.keys.spec(host, ended))
    servers = Servers(harness.store)
    assert [s.uuid for s in servers.list("p1")] == [live]
    assert harness.store.get(harness.store.keys.server(ended)) is None  # forgotten
    assert harness.store.get(harness.store.keys.location(ended)) is None
    found = servers.get(live)
    assert found.host == host and found.state == states.SCHEDULED
    assert servers.get("not-a-uuid") is None and servers.list("p2") == []


def test_a_failed_creates_view_is_an_error_server_and_an_orphan_view_goes():
    harness = Harness.new()
    servers = Servers(harness.store)
    failed, orphan = str(uuidlib.uuid4()), str(uuidlib.uuid4())
    servers.write_failed([view(failed, fault={"code": 500, "message": "no", "created": 1.0})])
    harness.store.put(messages.SERVER, harness.store.keys.server(orphan), view(orphan))
    assert [s.state for s in servers.list()] == [states.ERROR]
    assert harness.store.get(harness.store.keys.server(orphan)) is None
    server = servers.get(failed)
    assert servers.remove_failed(server) and servers.get(failed) is None


def test_saves_compare_with_what_was_read():
    harness = Harness.new()
    servers = Servers(harness.store)
    uuid = str(uuidlib.uuid4())
    servers.write_failed([view(uuid, fault={"code": 500, "message": "no", "created": 1.0})])
    first, second = servers.get(uuid), servers.get(uuid)
    assert servers.save(first, {"name": "renamed"}).doc["name"] == "renamed"
    with pytest.raises(ServerChanged):
        servers.save(second, {"name": "lost"})


def test_host_status_from_heartbeats_and_maintenance():
    harness = Harness.new()
    up, down = harness.add_host("up"), harness.add_host("down", alive=False)
    kept = harness.add_host("kept")
    harness.store.put(messages.HOST_MAINTENANCE, harness.store.keys.maintenance(kept),
                      {"reason": "disk", "since": time.time(), "by": "ann@hv"})
    assert Servers(harness.store).host_status({up, down, kept}) == {
        up: "UP", down: "DOWN", kept: "MAINTENANCE"}

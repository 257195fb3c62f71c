"""os-migrateLive and migrate through the real API: openstacksdk as Keystone's admin, a
second fake-driver compute and a controller (`schedule.py serve`) beside the module's
cloud. The server moves running (or stopped, cold) to the other host, Placement holding
that host alone after it and no migration consumer left; a member of its project may
not ask. A cold move waits in VERIFY_RESIZE (both hosts held) until confirmed, or
reverted: running again on its source. A server made on a host named at its create
(2.74's `host`) moves from it."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import openstack.exceptions
import pytest
import yaml

from etcd_compute import config as configuration
from etcd_compute.instances import records
from tests.api.conftest import IMAGE, Cloud, _host_config
from tests.conftest import DaemonProcess
from tests.support import REPO, wait_for


@pytest.fixture(scope="module")
def second_host(cloud: Cloud, tmp_path_factory: pytest.TempPathFactory, etcd_server: Any,
                placement_server: Any, cluster_pki: Any, glance_section: dict[str, Any]
                ) -> Iterator[dict[str, Any]]:
    """Another compute in the cloud's etcd prefix, and the controller that carries moves."""
    tmp = tmp_path_factory.mktemp("api-second-host")
    host = {**_host_config(tmp, etcd_server, placement_server, cluster_pki,
                           cloud.store.keys.prefix), "glance": glance_section}
    (tmp / "compute.yaml").write_text(yaml.safe_dump(host))
    controller = configuration.deep_merge(cloud.config, {"scheduler": {
        "controller_lease_ttl": 3}})
    (tmp / "schedule.yaml").write_text(yaml.safe_dump(controller))
    compute = DaemonProcess([str(REPO / "compute.py"), "--config", str(tmp / "compute.yaml")],
                            tmp / "compute.log").start()
    serve = DaemonProcess([str(REPO / "schedule.py"), "--config", str(tmp / "schedule.yaml"),
                           "serve"], tmp / "controller.log").start()
    try:
        store = cloud.store
        wait_for(lambda: store.get(store.keys.alive(host["compute"]["uuid"])) is not None,
                 timeout=30, what="the second compute's heartbeat")
        wait_for(lambda: store.get(store.keys.leader()) is not None, timeout=30,
                 what="a controller to lead")
        yield host["compute"]
    finally:
        serve.stop()
        compute.stop()


def test_an_admin_moves_a_server_live_to_the_host_named(cloud: Cloud,
                                                        second_host: dict[str, Any]) -> None:
    admin, demo = cloud.connect("admin"), cloud.connect("demo")
    server = demo.compute.create_server(name="mover", flavor_id="1", image_id=IMAGE,
                                        networks="auto")
    server = demo.compute.wait_for_server(server, status="ACTIVE", wait=60, interval=0.3)
    try:
        names = {h.id: h.name for h in admin.compute.hypervisors()}
        assert set(names) == {cloud.host, second_host["uuid"]}
        source = records.find(cloud.store, server.id)[0]
        target = next(rp for rp in names if rp != source)
        target_name = names[target]
        with pytest.raises(openstack.exceptions.ForbiddenException):
            demo.compute.live_migrate_server(server, host=target_name)
        admin.compute.live_migrate_server(server, host=target_name, block_migration="auto")

        def moved() -> bool:
            found = records.find(cloud.store, server.id)
            return found[0] == target and found[1].state == "ACTIVE"

        wait_for(moved, timeout=60, what="the server running on the other host")
        shown = admin.compute.get_server(server.id)
        assert (shown.status, shown.hypervisor_hostname) == ("ACTIVE", target_name)
        assert set(cloud.placement.get_allocations(server.id)["allocations"]) == {target}
        project = cloud.project_id("demo")
        assert not cloud.placement.project_usages(project, "MIGRATION").get("consumer_count")
        actions = [a.action for a in admin.compute.server_actions(server.id)]
        assert "live-migration" in actions and "migrate" not in actions  # as Nova names it
    finally:
        demo.compute.delete_server(server)
        demo.compute.wait_for_delete(server, wait=60, interval=0.3)
    assert cloud.usage("demo").get("consumer_count", 0) == 0


def test_an_admin_moves_a_stopped_server_cold_and_it_stays_stopped_there(
        cloud: Cloud, second_host: dict[str, Any]) -> None:
    admin, demo = cloud.connect("admin"), cloud.connect("demo")
    server = demo.compute.create_server(name="cold", flavor_id="1", image_id=IMAGE,
                                        networks="auto")
    server = demo.compute.wait_for_server(server, status="ACTIVE", wait=60, interval=0.3)
    try:
        demo.compute.stop_server(server)
        demo.compute.wait_for_server(server, status="SHUTOFF", wait=60, interval=0.3)
        source = records.find(cloud.store, server.id)[0]
        with pytest.raises(openstack.exceptions.ForbiddenException):
            demo.compute.migrate_server(server)
        admin.compute.migrate_server(server)
        names = {h.id: h.name for h in admin.compute.hypervisors()}
        target = next(rp for rp in names if rp != source)  # two hosts: the other one
        # As Nova's: VERIFY_RESIZE once defined there, both hosts held until the confirm.
        admin.compute.wait_for_server(server, status="VERIFY_RESIZE", wait=60,
                                      interval=0.3)
        project = cloud.project_id("demo")
        assert cloud.placement.project_usages(project, "MIGRATION").get("consumer_count") == 1
        (migration,) = [m for m in admin.compute.migrations() if m.server_id == server.id]
        assert (migration.migration_type, migration.status) == ("migration", "finished")
        demo.compute.confirm_server_resize(server)  # the owner's, as Nova's policy

        def moved() -> bool:
            found = records.find(cloud.store, server.id)
            return found[0] not in (None, source) and found[1].state == "SHUTOFF"

        wait_for(moved, timeout=60, what="the server stopped on the other host")
        shown = admin.compute.get_server(server.id)
        assert (shown.status, shown.hypervisor_hostname) == ("SHUTOFF", names[target])
        assert set(cloud.placement.get_allocations(server.id)["allocations"]) == {target}
        assert not cloud.placement.project_usages(project, "MIGRATION").get("consumer_count")
        (migration,) = [m for m in admin.compute.migrations() if m.server_id == server.id]
        assert migration.status == "confirmed"
        actions = [a.action for a in admin.compute.server_actions(server.id)]
        assert "migrate" in actions and "live-migration" not in actions
    finally:
        demo.compute.delete_server(server)
        demo.compute.wait_for_delete(server, wait=60, interval=0.3)
    assert cloud.usage("demo").get("consumer_count", 0) == 0


def test_a_cold_move_reverted_runs_again_on_its_source_and_nothing_is_left_there(
        cloud: Cloud, second_host: dict[str, Any]) -> None:
    """Nova's revertResize of a migration: back on the source, started again (it ran), the
    instance's claim there alone; the destination's guest and its claim gone."""
    admin, demo = cloud.connect("admin"), cloud.connect("demo")
    server = demo.compute.create_server(name="back", flavor_id="1", image_id=IMAGE,
                                        networks="auto")
    server = demo.compute.wait_for_server(server, status="ACTIVE", wait=60, interval=0.3)
    try:
        source = records.find(cloud.store, server.id)[0]
        names = {h.id: h.name for h in admin.compute.hypervisors()}
        target = next(rp for rp in names if rp != source)
        answer = admin.compute.post(f"/servers/{server.id}/action", microversion="2.56",
                                    json={"migrate": {"host": names[target]}})
        assert answer.status_code == 202, answer.text
        admin.compute.wait_for_server(server, status="VERIFY_RESIZE", wait=60, interval=0.3)
        assert records.find(cloud.store, server.id)[1].state == "MIGRATED"
        assert records.read_record(cloud.store, target, server.id).state == "INCOMING"
        admin.compute.revert_server_resize(server)
        shown = admin.compute.wait_for_server(server, status="ACTIVE", wait=60, interval=0.3)
        assert shown.hypervisor_hostname == names[source] and not shown.task_state
        assert records.find(cloud.store, server.id)[0] == source
        wait_for(lambda: records.read_record(cloud.store, target, server.id).record is None,
                 timeout=30, what="the destination's keys for it gone")
        assert set(cloud.placement.get_allocations(server.id)["allocations"]) == {source}
        project = cloud.project_id("demo")
        assert not cloud.placement.project_usages(project, "MIGRATION").get("consumer_count")
        (migration,) = [m for m in admin.compute.migrations() if m.server_id == server.id]
        assert migration.status == "reverted"
        actions = [a.action for a in admin.compute.server_actions(server.id)]
        assert "revertResize" in actions, actions
    finally:
        demo.compute.delete_server(server)
        demo.compute.wait_for_delete(server, wait=60, interval=0.3)
    assert cloud.usage("demo").get("consumer_count", 0) == 0


def test_a_server_made_on_a_named_host_moves_live_to_another_host_named(
        cloud: Cloud, second_host: dict[str, Any]) -> None:
    """Tempest's TestNetworkAdvancedServerMigrationWithHost: the create names the source
    (2.74's `host`), the live move the destination. The create's host bound every later
    placement of the server to it, and the move was refused: "No valid host was found.
    host ... would not take it: no room"."""
    admin = cloud.connect("admin")
    names = {h.id: h.name for h in admin.compute.hypervisors()}
    source, target = cloud.host, second_host["uuid"]
    answer = admin.compute.request(
        "/servers", "POST", microversion="2.74", raise_exc=False,
        json={"server": {"name": "pinned", "flavorRef": "1", "imageRef": IMAGE,
                         "networks": "auto", "host": names[source]}})
    assert answer.status_code == 202, answer.text
    server = admin.compute.get_server(answer.json()["server"]["id"])
    server = admin.compute.wait_for_server(server, status="ACTIVE", wait=60, interval=0.3)
    try:
        assert records.find(cloud.store, server.id)[0] == source
        admin.compute.live_migrate_server(server, host=names[target], block_migration="auto")

        def moved() -> bool:
            found = records.find(cloud.store, server.id)
            return found[0] == target and found[1].state == "ACTIVE"

        wait_for(moved, timeout=60, what="the server running on the host named")
        shown = admin.compute.get_server(server.id)
        assert (shown.status, shown.hypervisor_hostname) == ("ACTIVE", names[target])
        assert set(cloud.placement.get_allocations(server.id)["allocations"]) == {target}
    finally:
        admin.compute.delete_server(server)
        admin.compute.wait_for_delete(server, wait=60, interval=0.3)

"""A demo member creates, lists, shows and deletes a server with openstacksdk, through
Keystone's catalog and the real API; another project sees nothing of it; Placement holds
its claim for the demo project while it lives, and nothing after."""

from __future__ import annotations

import pytest

from tests.api.conftest import IMAGE, Cloud
from tests.support import wait_for


def test_a_member_creates_lists_shows_and_deletes_a_server(cloud: Cloud) -> None:
    conn = cloud.connect("demo")
    server = conn.compute.create_server(name="web 1", flavor_id="1", image_id=IMAGE,
                                        networks="auto", metadata={"role": "web"})
    server = conn.compute.wait_for_server(server, status="ACTIVE", wait=60, interval=0.5)
    assert server.status == "ACTIVE"
    assert server.name == "web 1" and server.metadata == {"role": "web"}
    assert server.project_id == cloud.project_id("demo")
    assert server.addresses and list(server.addresses.values())[0][0]["addr"]
    assert server.flavor["original_name"] == "m1.tiny" and server.flavor["vcpus"] == 1
    assert server.power_state == 1 and server.vm_state == "active"
    # A member sees no extended attributes (the host is the admin's business).
    assert server.hypervisor_hostname is None and server.host is None
    assert [s.id for s in conn.compute.servers()] == [server.id]
    assert cloud.usage("demo") == {"consumer_count": 1, "VCPU": 1, "MEMORY_MB": 256,
                                   "DISK_GB": 1}
    admin = cloud.connect("admin")
    seen = admin.compute.get_server(server.id)
    assert seen.hypervisor_hostname and seen.instance_name == server.id

    conn.compute.delete_server(server)
    conn.compute.wait_for_delete(server, wait=60, interval=0.5)
    assert list(conn.compute.servers()) == []
    wait_for(lambda: not cloud.usage("demo").get("consumer_count"), timeout=30,
             what="the claim freed")
    # Its view stays with the DELETED record (which expires, and takes it along).
    record = cloud.store.get(cloud.store.keys.record(cloud.host, server.id))
    assert record is not None and b'"DELETED"' in record.value


def test_another_projects_server_is_not_found(cloud: Cloud) -> None:
    import openstack.exceptions

    demo, alt = cloud.connect("demo"), cloud.connect("alt")
    server = demo.compute.create_server(name="mine", flavor_id="1", image_id=IMAGE,
                                        networks="auto")
    try:
        with pytest.raises(openstack.exceptions.NotFoundException):
            alt.compute.get_server(server.id)
        with pytest.raises(openstack.exceptions.NotFoundException):
            alt.compute.delete_server(server.id, ignore_missing=False)
        assert list(alt.compute.servers()) == []
        # all_tenants is the admin's: a member asking for it is refused, seeing nothing.
        response = cloud.session("alt").get(cloud.api.endpoint + "/servers?all_tenants=1",
                                            raise_exc=False)
        assert response.status_code == 403
        assert "get_all_tenants" in response.json()["forbidden"]["message"]
        # The server is untouched.
        assert demo.compute.get_server(server.id).id == server.id
    finally:
        demo.compute.delete_server(server)
        demo.compute.wait_for_delete(server, wait=60, interval=0.5)


def test_operators_list_a_projects_servers_with_schedule_py(cloud: Cloud, tmp_path) -> None:
    import json

    import yaml

    from tests.support import run_cli

    demo = cloud.connect("demo")
    server = demo.compute.create_server(name="listed", flavor_id="1", image_id=IMAGE,
                                        networks="auto")
    config = tmp_path / "schedule.yaml"
    config.write_text(yaml.safe_dump(cloud.config))
    try:
        mine = run_cli("schedule.py", "--config", str(config), "list", "--project",
                       cloud.project_id("demo"), "--json")
        assert mine.code == 0, mine.stderr
        # Earlier tests' servers show as DELETED until their records expire (as any).
        listed = [r for r in json.loads(mine.stdout) if r["state"] != "DELETED"]
        assert [r["uuid"] for r in listed] == [server.id]
        assert listed[0]["user_id"] == demo.current_user_id
        theirs = run_cli("schedule.py", "--config", str(config), "list", "--project",
                         cloud.project_id("alt"), "--json")
        assert [r for r in json.loads(theirs.stdout) if r["state"] != "DELETED"] == []
    finally:
        demo.compute.delete_server(server)
        demo.compute.wait_for_delete(server, wait=60, interval=0.5)

"""What admins manage and read through the real API (Keystone, etcd, Placement, a
fake-driver compute): host aggregates whose hosts join them in Placement (a zone the
scheduler then follows), what projects used, resizes as migrations, per-user quotas, the
hypervisor's uptime, the audit log Nova shows when none ran, and external events."""

from __future__ import annotations

import datetime
from typing import Any

from tests.api.conftest import IMAGE, Cloud
from tests.support import wait_for

V = {"OpenStack-API-Version": "compute 2.80"}


def _create(cloud: Cloud, name: str, user: str = "demo", **more: Any) -> Any:
    return cloud.session(user).post(
        cloud.api.endpoint + "/servers", raise_exc=False,
        json={"server": {"name": name, "flavorRef": "1", "imageRef": IMAGE, **more}})


def _wait_status(cloud: Cloud, uuid: str, status: str, user: str = "demo") -> dict:
    def shown() -> dict | None:
        server = cloud.session(user).get(f"{cloud.api.endpoint}/servers/{uuid}").json()[
            "server"]
        return server if server["status"] == status else None

    return wait_for(shown, timeout=60, what=f"server {uuid} {status}")


def _delete(cloud: Cloud, uuid: str, user: str = "demo") -> None:
    session = cloud.session(user)
    session.delete(f"{cloud.api.endpoint}/servers/{uuid}", raise_exc=False)
    wait_for(lambda: session.get(f"{cloud.api.endpoint}/servers/{uuid}",
                                 raise_exc=False).status_code == 404,
             timeout=60, what=f"server {uuid} gone")


def _host_name(cloud: Cloud) -> str:
    return str(cloud.placement.get_provider(cloud.host)["name"])


def test_an_aggregates_hosts_join_it_in_placement_and_its_zone_takes_servers(cloud: Cloud):
    admin, api = cloud.session("admin"), cloud.api.endpoint
    made = admin.post(f"{api}/os-aggregates", headers=V, json={"aggregate": {
        "name": "fast-disks", "availability_zone": "fast"}}).json()["aggregate"]
    action = f"{api}/os-aggregates/{made['id']}/action"
    try:
        host = _host_name(cloud)
        added = admin.post(action, headers=V, json={"add_host": {"host": host}}).json()
        assert added["aggregate"]["hosts"] == [host]
        assert made["uuid"] in cloud.placement.get_aggregates(cloud.host)
        again = admin.post(action, json={"add_host": {"host": host}}, raise_exc=False)
        assert again.status_code == 409
        zones = cloud.session("demo").get(f"{api}/os-availability-zone").json()
        assert "fast" in [z["zoneName"] for z in zones["availabilityZoneInfo"]]
        server = _create(cloud, "in-fast", availability_zone="fast")
        assert server.status_code == 202, server.text
        uuid = server.json()["server"]["id"]
        shown = _wait_status(cloud, uuid, "ACTIVE")
        assert shown["OS-EXT-AZ:availability_zone"] == "fast"
        _delete(cloud, uuid)
        # Not empty: Nova refuses to delete it.
        assert admin.delete(f"{api}/os-aggregates/{made['id']}",
                            raise_exc=False).status_code == 400
        admin.post(action, json={"remove_host": {"host": host}})
        assert made["uuid"] not in cloud.placement.get_aggregates(cloud.host)
        # A zone without hosts is no zone (Nova's 400).
        refused = _create(cloud, "nowhere", availability_zone="fast")
        assert refused.status_code == 400, refused.text
        assert "availability zone is not available" in refused.text
    finally:
        listed = admin.get(f"{api}/os-aggregates/{made['id']}").json()["aggregate"]
        for host in listed["hosts"]:
            admin.post(action, json={"remove_host": {"host": host}})
        admin.delete(f"{api}/os-aggregates/{made['id']}")
    assert admin.get(f"{api}/os-aggregates/{made['id']}", raise_exc=False).status_code == 404
    assert cloud.session("demo").get(f"{api}/os-aggregates",
                                     raise_exc=False).status_code == 403


def test_usage_migrations_and_events_of_a_resized_server(cloud: Cloud):
    admin, demo, api = cloud.session("admin"), cloud.session("demo"), cloud.api.endpoint
    created = _create(cloud, "measured")
    uuid = created.json()["server"]["id"]
    try:
        _wait_status(cloud, uuid, "ACTIVE")
        now = datetime.datetime.now(datetime.UTC).replace(tzinfo=None)
        period = (f"start={(now - datetime.timedelta(hours=1)).isoformat()}"
                  f"&end={(now + datetime.timedelta(hours=1)).isoformat()}")
        mine = demo.get(f"{api}/os-simple-tenant-usage/{cloud.project_id('demo')}?"
                        f"{period}").json()["tenant_usage"]
        (used,) = [s for s in mine["server_usages"] if s["instance_id"] == uuid]
        assert (used["vcpus"], used["memory_mb"], used["state"]) == (1, 256, "active")
        assert 0.9 < used["hours"] < 1.1  # counted to the period's end, as Nova
        assert demo.get(f"{api}/os-simple-tenant-usage?{period}",
                        raise_exc=False).status_code == 403
        listed = admin.get(f"{api}/os-simple-tenant-usage?{period}&detailed=1").json()
        assert cloud.project_id("demo") in [u["tenant_id"] for u in listed["tenant_usages"]]

        demo.post(f"{api}/servers/{uuid}/action", json={"resize": {"flavorRef": "2"}})
        _wait_status(cloud, uuid, "VERIFY_RESIZE")
        (moved,) = admin.get(f"{api}/os-migrations?instance_uuid={uuid}",
                             headers=V).json()["migrations"]
        assert (moved["migration_type"], moved["status"]) == ("resize", "finished")
        assert moved["source_compute"] == moved["dest_compute"] == _host_name(cloud)
        assert moved["project_id"] == cloud.project_id("demo")
        demo.post(f"{api}/servers/{uuid}/action", json={"confirmResize": None})
        _wait_status(cloud, uuid, "ACTIVE")
        (moved,) = admin.get(f"{api}/os-migrations?instance_uuid={uuid}",
                             headers=V).json()["migrations"]
        assert moved["status"] == "confirmed"

        service = _service_session(cloud)
        events = service.post(f"{api}/os-server-external-events", json={"events": [
            {"name": "network-changed", "server_uuid": uuid}]}).json()["events"]
        assert [(e["server_uuid"], e["code"]) for e in events] == [(uuid, 200)]
        # Nova's rule:service_or_admin: an admin may, a project's member may not.
        assert admin.post(f"{api}/os-server-external-events", raise_exc=False, json={
            "events": [{"name": "network-changed", "server_uuid": uuid}]}).status_code == 200
        assert demo.post(f"{api}/os-server-external-events", raise_exc=False, json={
            "events": [{"name": "network-changed", "server_uuid": uuid}]}).status_code == 403
    finally:
        _delete(cloud, uuid)


def _service_session(cloud: Cloud) -> Any:
    from keystoneauth1 import session
    from keystoneauth1.identity import v3

    section = cloud.keystone.client_section("etcd-compute", None, "service")
    auth = v3.Password(**{k: v for k, v in section.items()})
    return session.Session(auth=auth, verify=str(cloud.ca), timeout=60)


def test_a_users_quota_within_its_project(cloud: Cloud):
    admin, api = cloud.session("admin"), cloud.api.endpoint
    project, user = cloud.project_id("demo"), str(cloud.keystone._find("users", "demo"))
    url = f"{api}/os-quota-sets/{project}?user_id={user}"
    assert admin.put(url, json={"quota_set": {"instances": 1}}).json()[
        "quota_set"]["instances"] == 1
    made = []
    try:
        assert admin.get(url).json()["quota_set"]["instances"] == 1
        assert admin.get(f"{api}/os-quota-sets/{project}").json()["quota_set"][
            "instances"] == 10
        first = _create(cloud, "one")
        assert first.status_code == 202, first.text
        made.append(first.json()["server"]["id"])
        _wait_status(cloud, made[0], "ACTIVE")
        second = _create(cloud, "two")
        assert second.status_code == 403 and "instances" in second.text
    finally:
        for uuid in made:
            _delete(cloud, uuid)
        admin.delete(url)
    assert admin.get(url).json()["quota_set"]["instances"] == 10


def test_the_hypervisors_uptime_and_the_audit_log_nova_shows_when_none_ran(cloud: Cloud):
    admin, api = cloud.session("admin"), cloud.api.endpoint
    shown = admin.get(f"{api}/os-hypervisors/{cloud.host}/uptime",
                      headers={"OpenStack-API-Version": "compute 2.53"}).json()["hypervisor"]
    assert shown["hypervisor_hostname"] == _host_name(cloud)
    assert " up " in shown["uptime"]
    with open("/proc/uptime") as uptime:
        days = int(float(uptime.read().split()[0]) // 86400)
    assert (f" up {days} day" in shown["uptime"]) == (days > 0)
    log = admin.get(f"{api}/os-instance_usage_audit_log").json()["instance_usage_audit_logs"]
    assert _host_name(cloud) in log["hosts_not_run"] and log["total_instances"] == 0
    assert cloud.session("demo").get(f"{api}/os-instance_usage_audit_log",
                                     raise_exc=False).status_code == 403

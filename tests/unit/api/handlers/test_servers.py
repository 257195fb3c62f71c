"""Servers: a create is planned, claimed and written with its view for the caller's
project; a member sees and changes only its project's; refusals write nothing."""

from __future__ import annotations

import base64

import pytest

from etcd_compute import messages
from etcd_compute.instances import records
from tests.unit.api.harness import ADMIN, Harness

IMAGE = "file:///dev/null"


def test_a_create_claims_for_the_callers_project_and_writes_the_view(harness: Harness):
    key = harness.call("POST", "/v2.1/os-keypairs", {"keypair": {"name": "k"}},
                       version="2.2").json["keypair"]
    user_data = base64.b64encode(b"#cloud-config\n").decode()
    uuid = harness.boot("My web_1", metadata={"a": "b"}, key_name="k", user_data=user_data)
    consumer = harness.placement.consumers[uuid]
    assert (consumer["project_id"], consumer["user_id"]) == ("p1", "u1")
    host = records.locate(harness.store, uuid)["host"]
    spec = messages.decode(messages.INSTANCE_SPEC,
                           harness.store.get(harness.store.keys.spec(host, uuid)).value)
    assert spec["name"] == "my-web-1" and spec["ssh_key"] == key["public_key"]
    assert spec["user_data"] == "#cloud-config\n" and spec["project_id"] == "p1"
    view = messages.decode(messages.SERVER,
                           harness.store.get(harness.store.keys.server(uuid)).value)
    assert (view["name"], view["metadata"], view["key_name"], view["user_data"]) == \
        ("My web_1", {"a": "b"}, "k", user_data)
    shown = harness.call("GET", f"/v2.1/servers/{uuid}").json["server"]
    assert (shown["status"], shown["OS-EXT-STS:task_state"], shown["addresses"]) == \
        ("BUILD", "scheduling", {})
    harness.activate(uuid)
    shown = harness.call("GET", f"/v2.1/servers/{uuid}").json["server"]
    assert shown["status"] == "ACTIVE" and shown["OS-EXT-STS:power_state"] == 1
    assert shown["OS-SRV-USG:launched_at"] and shown["OS-SRV-USG:terminated_at"] is None
    assert shown["addresses"] == {"etcd-compute": [
        {"version": 4, "addr": "192.168.123.10", "OS-EXT-IPS:type": "fixed"}]}
    assert shown["key_name"] == "k" and shown["tenant_id"] == "p1"
    assert "OS-EXT-SRV-ATTR:host" not in shown


def test_the_create_answer_is_novas(harness: Harness):
    answer = harness.call("POST", "/v2.1/servers", {"server": {
        "name": "a", "flavorRef": "http://x/flavors/1", "imageRef": IMAGE}})
    assert answer.status_int == 202
    server = answer.json["server"]
    assert set(server) == {"id", "links", "OS-DCF:diskConfig", "security_groups"}
    assert answer.headers["Location"] == server["links"][0]["href"]
    assert "adminPass" not in server  # we set no password in the guest: none is claimed


def test_another_projects_server_is_404_and_an_admin_sees_it_whole(harness: Harness):
    uuid = harness.boot()
    for method in ("GET", "DELETE"):
        other = harness.call(method, f"/v2.1/servers/{uuid}", project="p2")
        assert other.status_int == 404
        assert other.json["itemNotFound"]["message"] == f"Instance {uuid} could not be found."
    assert harness.call("PUT", f"/v2.1/servers/{uuid}", {"server": {"name": "x"}},
                        project="p2").status_int == 404
    shown = harness.admin("GET", f"/v2.1/servers/{uuid}", version="2.16").json["server"]
    assert shown["OS-EXT-SRV-ATTR:hypervisor_hostname"] == "hv1"
    assert shown["OS-EXT-SRV-ATTR:instance_name"] == uuid and shown["host_status"] == "UP"
    assert shown["OS-EXT-SRV-ATTR:hostname"] == "web"
    assert harness.call("GET", "/v2.1/servers", project="p2").json == {"servers": []}


def test_update_renames_and_delete_asks_the_host(harness: Harness):
    uuid = harness.boot()
    harness.activate(uuid)
    renamed = harness.call("PUT", f"/v2.1/servers/{uuid}",
                           {"server": {"name": "db", "description": "primary",
                                       "accessIPv6": "0000:0000:0000:0000:0000:babe:220.12.22.2"}},
                           version="2.19").json["server"]
    assert (renamed["name"], renamed["description"]) == ("db", "primary")
    assert renamed["accessIPv6"] == "::babe:dc0c:1602"  # canonical, as Nova's column gives it
    assert "OS-EXT-STS:vm_state" not in renamed  # before 2.75, less than a show
    full = harness.call("PUT", f"/v2.1/servers/{uuid}", {"server": {"name": "db"}},
                        version="2.75").json["server"]
    assert full["OS-EXT-STS:vm_state"] == "active" and full["server_groups"] == []
    assert harness.call("PUT", f"/v2.1/servers/{uuid}", {"server": {"description": "x"}},
                        version="2.18").status_int == 400
    assert harness.call("DELETE", f"/v2.1/servers/{uuid}").status_int == 204
    host = records.locate(harness.store, uuid)["host"]
    spec = messages.decode(messages.INSTANCE_SPEC,
                           harness.store.get(harness.store.keys.spec(host, uuid)).value)
    assert spec["action"] == "destroy"
    shown = harness.call("GET", f"/v2.1/servers/{uuid}").json["server"]
    assert shown["OS-EXT-STS:task_state"] == "deleting"


def test_no_valid_host_is_a_server_in_error_with_novas_fault(harness: Harness):
    harness.add_flavor("big", "huge", vcpus=18)  # within the quota (20), on no host (16)
    uuid = harness.boot(flavorRef="big")
    assert harness.placement.consumers == {}
    shown = harness.call("GET", f"/v2.1/servers/{uuid}").json["server"]
    assert shown["status"] == "ERROR"
    assert shown["fault"]["message"] == \
        "No valid host was found. There are not enough hosts available."
    assert "details" not in shown["fault"]  # a 500's details are the admin's
    admin = harness.call("GET", f"/v2.1/servers/{uuid}", roles=ADMIN).json["server"]
    assert "VCPU" in admin["fault"]["details"]
    assert harness.call("DELETE", f"/v2.1/servers/{uuid}").status_int == 204
    assert harness.call("GET", f"/v2.1/servers/{uuid}").status_int == 404


@pytest.mark.parametrize("fields,words", [
    ({"flavorRef": "nope"}, "Flavor nope could not be found."),
    ({"imageRef": None}, "imageRef is required"),
    ({"imageRef": "ftp://x"}, "Can not find requested image"),
    # A URL users were not given: the host would fetch it for them (no SSRF by image).
    ({"imageRef": "http://169.254.169.254/latest/"}, "Can not find requested image"),
    ({"imageRef": "file:///etc/shadow"}, "Can not find requested image"),
    ({"imageRef": "file:///dev/../etc/shadow"}, "Can not find requested image"),
    ({"key_name": "none"}, "Invalid key_name provided."),
    ({"user_data": base64.b64encode(b"\xff\xfe").decode()}, "UTF-8"),
    ({"personality": [{"path": "/x", "contents": "eA=="}]}, "Personality"),
    ({"block_device_mapping_v2": [{"uuid": "x"}]}, "Block device mappings"),
    ({"block_device_mapping_v2": [{"uuid": IMAGE, "source_type": "image",
                                   "destination_type": "volume", "boot_index": 0}]},
     "Block device mappings"),
    ({"block_device_mapping_v2": [{"uuid": IMAGE, "source_type": "image", "boot_index": 0},
                                  {"source_type": "blank", "destination_type": "local"}]},
     "Block device mappings"),
    ({"security_groups": [{"name": "web"}]}, "Security group web not found."),
    ({"availability_zone": "moon"}, "The requested availability zone is not available"),
    ({"min_count": 2, "max_count": 1}, "min_count must be <= max_count"),
])
def test_refusals_write_and_claim_nothing(harness: Harness, fields, words):
    body = {"server": {"name": "x", "flavorRef": "1", "imageRef": IMAGE, **fields}}
    body["server"] = {k: v for k, v in body["server"].items() if v is not None}
    refused = harness.call("POST", "/v2.1/servers", body)
    assert refused.status_int == 400, refused.text
    assert words in refused.json["badRequest"]["message"]
    assert harness.store.get_prefix(harness.store.keys.servers())[0] == []
    assert harness.store.get_prefix(harness.store.keys.locations())[0] == []
    assert harness.placement.consumers == {}


def test_the_image_as_a_local_boot_device_is_the_image(harness: Harness):
    """What the openstack CLI sends with --image: the same image, on the local disk."""
    device = {"uuid": IMAGE, "boot_index": 0, "source_type": "image",
              "destination_type": "local", "delete_on_termination": True}
    for server in ({"imageRef": IMAGE, "block_device_mapping_v2": [device]},
                   {"block_device_mapping_v2": [device]}):
        body = {"server": {"name": "x", "flavorRef": "1", **server}}
        answer = harness.call("POST", "/v2.1/servers", body)
        assert answer.status_int == 202, answer.text
        assert harness.show(answer.json["server"]["id"])["image"]["id"] == IMAGE


def test_networks_are_required_from_2_37_and_only_auto_none_or_the_hosts_network(
        harness: Harness):
    from etcd_compute.api.handlers.networks import network_id

    body = {"server": {"name": "x", "flavorRef": "1", "imageRef": IMAGE}}
    assert harness.call("POST", "/v2.1/servers", body, version="2.37").status_int == 400
    ours = network_id("etcd-compute")
    # none: a server without a network interface (its host is told so).
    body["server"]["networks"] = "none"
    answer = harness.call("POST", "/v2.1/servers", body, version="2.37")
    assert answer.status_int == 202, answer.text
    uuid = answer.json["server"]["id"]
    host = records.locate(harness.store, uuid)["host"]
    spec = messages.decode(messages.INSTANCE_SPEC,
                           harness.store.get(harness.store.keys.spec(host, uuid)).value)
    assert spec["network"] is False
    for refused in ([{"uuid": ours}, {"uuid": ours}],
                    [{"uuid": "6f1c0f6e-3b0a-4c1e-9d1e-2f8f3c6a9a02"}],
                    [{"uuid": ours, "fixed_ip": "10.0.0.9"}]):
        body["server"]["networks"] = refused
        assert harness.call("POST", "/v2.1/servers", body,
                            version="2.37").status_int == 400, refused
    for taken in ("auto", [{"uuid": ours}]):
        body["server"]["networks"] = taken
        answer = harness.call("POST", "/v2.1/servers", body, version="2.37")
        assert answer.status_int == 202, taken
        uuid = answer.json["server"]["id"]
        host = records.locate(harness.store, uuid)["host"]
        spec = messages.decode(messages.INSTANCE_SPEC,
                               harness.store.get(harness.store.keys.spec(host, uuid)).value)
        assert "network" not in spec  # the hosts' network, as every spec before


def test_metadata_over_its_quota_is_403(harness: Harness):
    harness.backend.quotas.update("p1", {"metadata_items": 1})
    refused = harness.call("POST", "/v2.1/servers", {"server": {
        "name": "x", "flavorRef": "1", "imageRef": IMAGE, "metadata": {"a": "1", "b": "2"}}})
    assert refused.status_int == 403 and "metadata_items" in refused.json["forbidden"][
        "message"]


def test_a_zone_is_an_aggregate_and_a_host_is_the_admins():
    harness = Harness.new(availability_zones={"rack1": "5b3a2c1d-0e9f-4a8b-8c7d-6e5f4a3b2c1d"})
    harness.add_host()
    harness.add_flavor()
    # No host joined rack1's aggregate: nothing fits there.
    uuid = harness.boot(availability_zone="rack1")
    shown = harness.call("GET", f"/v2.1/servers/{uuid}").json["server"]
    assert shown["status"] == "ERROR" and shown["OS-EXT-AZ:availability_zone"] == "rack1"
    forced = {"server": {"name": "x", "flavorRef": "1", "imageRef": IMAGE,
                         "availability_zone": "nova:hv1"}}
    assert harness.call("POST", "/v2.1/servers", forced).status_int == 403
    placed = harness.admin("POST", "/v2.1/servers", forced)
    assert placed.status_int == 202
    forced["server"]["availability_zone"] = "nova:hv9"
    assert harness.admin("POST", "/v2.1/servers", forced).status_int == 400

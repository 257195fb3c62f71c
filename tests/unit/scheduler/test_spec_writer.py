"""The spec a host receives, and one transaction per request for every spec, SCHEDULED record,
location and group member (FakeStore)."""

from __future__ import annotations

import json
import uuid as uuidlib

from etcd_compute import messages
from etcd_compute.scheduler.spec import Destination, RequestSpec
from etcd_compute.scheduler.spec_writer import instance_spec, write_specs
from tests.unit.fakes import FakeStore

HOST, OTHER = str(uuidlib.UUID(int=1)), str(uuidlib.UUID(int=2))
SETTINGS = {"default_image": "file:///default.img", "project_id": "proj", "user_id": "user",
            "on_host_failure": "rebuild"}
RESOURCES = {"VCPU": 1, "MEMORY_MB": 256}


def destination(host: str = HOST, name: str = "web", alternates=None) -> Destination:
    return Destination(uuid=str(uuidlib.uuid4()), name=name, host=host, host_name=f"name-{host}",
                       allocations={host: {"resources": dict(RESOURCES)}},
                       alternates=alternates or [])


def test_instance_spec_carries_the_request_and_the_destination():
    alternates = [{"host": OTHER, "allocations": {OTHER: {"resources": RESOURCES}}}]
    target = destination(alternates=alternates)
    request = RequestSpec.build("resources=VCPU:1,MEMORY_MB:256", image_url="https://h/i.img",
                                user_data="#!/bin/sh", ssh_key="ssh-ed25519 K",
                                group=("g", "affinity"), on_host_failure="error")
    spec = instance_spec(target, request, SETTINGS, requested_at=123.5, requested_by="ann@desk")
    assert spec == {
        "action": "build", "uuid": target.uuid, "name": "web", "host": HOST,
        "resources": RESOURCES, "allocations": target.allocations,
        "image": {"url": "https://h/i.img", "sha256": None},
        "user_data": "#!/bin/sh", "ssh_key": "ssh-ed25519 K",
        "project_id": "proj", "user_id": "user",
        "group": {"name": "g", "policy": "affinity"},
        "alternates": alternates, "requested_at": 123.5, "requested_by": "ann@desk",
        "query": "resources=MEMORY_MB:256,VCPU:1", "on_host_failure": "error",
    }
    messages.check(messages.INSTANCE_SPEC, spec)


def test_the_default_on_host_failure_comes_from_the_settings():
    spec = instance_spec(destination(), RequestSpec.build("resources=VCPU:1"), SETTINGS, 1.0)
    assert spec["on_host_failure"] == "rebuild"


def test_instance_spec_defaults_image_and_no_group():
    spec = instance_spec(destination(), RequestSpec.build("resources=VCPU:1"), SETTINGS, 1.0)
    assert spec["image"] == {"url": "file:///default.img", "sha256": None}
    assert spec["group"] is None and spec["user_data"] is None and spec["ssh_key"] is None
    messages.check(messages.INSTANCE_SPEC, spec)


def test_write_specs_writes_everything_in_one_transaction_at_one_revision():
    store = FakeStore("/p")
    store.put_raw("/p/unrelated", "x")
    before = len(store.committed)
    targets = [destination(HOST, "web-1"), destination(OTHER, "web-2"), destination(HOST, "web-3")]
    request = RequestSpec.build("resources=VCPU:1,MEMORY_MB:256", name="web", count=3,
                                group=("g", "anti-affinity"))
    _, group_read_at = store.get_prefix(store.keys.group("g"))
    revision = write_specs(store, targets, request, SETTINGS, group_read_at)
    assert revision == store.revision
    assert len(store.committed) == before + 1
    assert len(store.committed[-1].success) == 4 * len(targets)
    for target in targets:
        keys = [store.keys.spec(target.host, target.uuid),
                store.keys.record(target.host, target.uuid),
                store.keys.group_member("g", target.uuid), store.keys.location(target.uuid)]
        assert [store.get(key).mod_revision for key in keys] == [revision] * 4
        spec, _ = store.read(messages.INSTANCE_SPEC, keys[0])
        assert (spec["name"], spec["host"], spec["action"]) == (target.name, target.host, "build")
        record, _ = store.read(messages.INSTANCE_RECORD, keys[1])
        assert (record["state"], record["host"], record["host_name"]) == (
            "SCHEDULED", target.host, target.host_name)
        assert record["created_at"] == spec["requested_at"]
        member, _ = store.read(messages.GROUP_MEMBER, keys[2])
        assert member == {"host": target.host, "policy": "anti-affinity"}
        location, _ = store.read(messages.INSTANCE_LOCATION, keys[3])
        assert location == {"host": target.host, "group": "g",
                            "created_at": spec["requested_at"]}


def test_write_specs_without_a_group_writes_no_member():
    store = FakeStore()
    target = destination()
    revision = write_specs(store, [target], RequestSpec.build("resources=VCPU:1"), SETTINGS, None)
    assert revision is not None
    assert sorted(e.key for e in store.get_prefix("")[0]) == sorted(
        [store.keys.spec(HOST, target.uuid), store.keys.record(HOST, target.uuid),
         store.keys.location(target.uuid)])
    assert store.read(messages.INSTANCE_LOCATION,
                      store.keys.location(target.uuid))[0]["group"] is None


def test_write_specs_refuses_when_the_group_grew_since_it_was_read():
    store = FakeStore()
    request = RequestSpec.build("resources=VCPU:1", group=("g", "anti-affinity"))
    _, read_at = store.get_prefix(store.keys.group("g"))
    # Another scheduler adds a member to the group meanwhile.
    store.put_raw(store.keys.group_member("g", str(uuidlib.uuid4())),
                  json.dumps({"host": HOST, "policy": "anti-affinity"}))
    written_before = set(store.entries)
    assert write_specs(store, [destination()], request, SETTINGS, read_at) is None
    assert set(store.entries) == written_before


def test_the_api_view_of_each_instance_is_written_with_it():
    from etcd_compute.scheduler.spec_writer import transaction

    store = FakeStore()
    uuids = [str(uuidlib.uuid4()) for _ in range(2)]
    request = RequestSpec.build("resources=VCPU:1,MEMORY_MB:256", count=2, name="web",
                                project_id="demo", user_id="ann", uuids=uuids,
                                server={"project_id": "demo", "user_id": "ann",
                                        "name": "My web", "metadata": {"k": "v"}})
    targets = [Destination(uuid=u, name=request.instance_name(i, u), host=HOST,
                           host_name="h", allocations={HOST: {"resources": RESOURCES}})
               for i, u in enumerate(uuids)]
    assert store.commit(transaction(store.keys, targets, request, SETTINGS, None)) is not None
    servers = [messages.decode(messages.SERVER, store.get(store.keys.server(u)).value)
               for u in uuids]
    assert [(s["uuid"], s["name"], s["hostname"], s["launch_index"]) for s in servers] == [
        (uuids[0], "My web-1", "web-1", 0), (uuids[1], "My web-2", "web-2", 1)]
    spec = messages.decode(messages.INSTANCE_SPEC,
                           store.get(store.keys.spec(HOST, uuids[0])).value)
    record = messages.decode(messages.INSTANCE_RECORD,
                             store.get(store.keys.record(HOST, uuids[0])).value)
    assert (spec["project_id"], spec["user_id"]) == ("demo", "ann")
    assert (record["project_id"], record["user_id"]) == ("demo", "ann")
    # The view exists already (a fault written for an earlier try): nothing is written.
    assert store.commit(transaction(store.keys, targets, request, SETTINGS, None)) is None


def test_the_neutron_backends_networks_and_groups_go_to_the_host():
    networks = [{"uuid": OTHER, "fixed_ip": "10.0.0.9"}, {"port": HOST}]
    request = RequestSpec.build("resources=VCPU:1", networks=networks, security_groups=[OTHER])
    spec = instance_spec(destination(), request, SETTINGS, 1.0)
    assert (spec["networks"], spec["security_groups"]) == (networks, [OTHER])
    messages.check(messages.INSTANCE_SPEC, spec)

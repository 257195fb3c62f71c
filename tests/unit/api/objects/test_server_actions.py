"""Server actions' objects: the view changes in the host request's transaction, a resize's
hold and flavors, the confirm's new flavor, the checks before anything is claimed."""

from __future__ import annotations

import pytest

from etcd_compute import messages
from etcd_compute.api.objects.quotas import OverQuota
from etcd_compute.errors import UsageError
from etcd_compute.instances import records
from tests.unit.api.harness import Harness

BY = "api:u1@p1"


@pytest.fixture
def harness() -> Harness:
    harness = Harness.new()
    harness.add_host()
    harness.add_flavor()
    harness.add_flavor("2", "m1.small", vcpus=2, ram=512, disk=2)
    return harness


def server_of(harness: Harness, uuid: str):
    return harness.backend.servers.get(uuid)


def doc_of(harness: Harness, uuid: str) -> dict:
    return messages.decode(messages.SERVER,
                           harness.store.get(harness.store.keys.server(uuid)).value)


def test_the_view_is_written_with_the_hosts_request(harness: Harness):
    uuid = harness.boot()
    harness.activate(uuid)
    harness.backend.actions.stop(server_of(harness, uuid), BY)
    host = records.locate(harness.store, uuid)["host"]
    spec_entry = harness.store.get(harness.store.keys.spec(host, uuid))
    view_entry = harness.store.get(harness.store.keys.server(uuid))
    assert spec_entry.mod_revision == view_entry.mod_revision  # one transaction
    task = doc_of(harness, uuid)["task"]
    spec = messages.decode(messages.INSTANCE_SPEC, spec_entry.value)
    assert task["action"] == "stop" and task["request_id"] == spec["request"]["id"]
    assert spec["request"]["by"] == BY  # the API's caller, for the events
    # The create's spec names the API's caller too.
    assert spec["requested_by"] == "api:u1@p1"


def test_a_resize_records_both_flavors_and_the_hold(harness: Harness):
    uuid = harness.boot()
    harness.activate(uuid)
    harness.backend.actions.resize(server_of(harness, uuid),
                                   harness.backend.flavors.get("2"), BY)
    resize = doc_of(harness, uuid)["resize"]
    assert (resize["old_flavor"]["name"], resize["new_flavor"]["name"]) == ("m1.tiny",
                                                                            "m1.small")
    assert harness.placement.consumers[resize["hold"]]["consumer_type"] == "MIGRATION"
    harness.host_does(uuid)
    harness.backend.actions.confirm_resize(server_of(harness, uuid), BY)
    doc = doc_of(harness, uuid)
    assert doc["flavor"]["name"] == "m1.small" and doc["resize"] is None
    assert resize["hold"] not in harness.placement.consumers


def test_a_resize_to_a_flavor_whose_traits_its_host_lacks_is_refused(harness: Harness):
    harness.add_flavor("3", "fast", vcpus=2, ram=512, disk=2,
                       extra_specs={"trait:CUSTOM_FAST": "required"})
    harness.add_flavor("4", "split", vcpus=2, ram=512, disk=2,
                       extra_specs={"resources1:VCPU": "1"})
    uuid = harness.boot()
    harness.activate(uuid)
    with pytest.raises(UsageError, match="CUSTOM_FAST"):
        harness.backend.actions.resize(server_of(harness, uuid),
                                       harness.backend.flavors.get("3"), BY)
    with pytest.raises(UsageError, match="granular"):
        harness.backend.actions.resize(server_of(harness, uuid),
                                       harness.backend.flavors.get("4"), BY)


def test_a_resize_beyond_the_projects_ram_is_over_quota(harness: Harness):
    harness.add_flavor("5", "big", vcpus=1, ram=60000, disk=2)
    uuid = harness.boot()
    harness.activate(uuid)
    with pytest.raises(OverQuota, match="Quota exceeded for ram: Requested 59744"):
        harness.backend.actions.resize(server_of(harness, uuid),
                                       harness.backend.flavors.get("5"), BY)


def test_console_output_is_none_until_published(harness: Harness):
    uuid = harness.boot()
    harness.activate(uuid)
    assert harness.backend.actions.console_output(server_of(harness, uuid)) is None

"""The queue's messages: a request as the CLI writes it and the service reads it back (checked
again), hostile entries carrying their fault, answers that raise what the direct path raises."""

from __future__ import annotations

import json
import uuid as uuidlib

import pytest

from etcd_compute import messages
from etcd_compute.defaults import SCHEDULE_DEFAULTS
from etcd_compute.errors import (
    ConflictError,
    EtcdComputeError,
    NoValidHost,
    ServiceUnavailable,
    UsageError,
)
from etcd_compute.scheduler.queue import (
    answer_of,
    answer_ops,
    expired,
    expired_error,
    instance_uuids,
    read_pending,
    request_message,
    request_spec_of,
    result_of,
)
from etcd_compute.scheduler.spec import Destination, RequestSpec, operator_name
from tests.unit.fakes import FakeStore

SETTINGS = SCHEDULE_DEFAULTS["scheduler"]
QUERY = "resources=VCPU:1,MEMORY_MB:256,DISK_GB:1"
HOST = "00000000-0000-0000-0000-00000000000a"


def put_request(store: FakeStore, message: object, name: str | None = None) -> str:
    name = name or str(uuidlib.uuid4())
    raw = message if isinstance(message, str) else json.dumps(message)
    store.put_raw(store.keys.queue_request(name), raw)
    return name


def test_instance_uuids_are_the_same_for_whoever_answers_and_distinct():
    request = str(uuidlib.uuid4())
    first = instance_uuids(request, 3)
    assert first == instance_uuids(request, 3) and len(set(first)) == 3
    assert set(first).isdisjoint(instance_uuids(str(uuidlib.uuid4()), 3))


def test_a_request_round_trips_and_is_checked_again_by_the_service():
    spec = RequestSpec.build(QUERY + "&required=!CUSTOM_SLOW", count=2, name="web",
                             image_url="file:///i.img", user_data="#!/bin/sh\n", ssh_key="k",
                             group=("g", "anti-affinity"), zone=HOST, on_host_failure="error")
    message = request_message(spec, "vm:1")
    messages.check(messages.SCHEDULE_REQUEST, message)
    assert message["requested_by"] == operator_name()  # the events name who asked
    again = request_spec_of(message, SETTINGS)
    assert again.request.to_query() == spec.request.to_query()
    assert (again.count, again.name, again.image_url, again.user_data, again.ssh_key,
            again.group, again.on_host_failure) == \
        (2, "web", "file:///i.img", "#!/bin/sh\n", "k", ("g", "anti-affinity"), "error")


def test_a_request_carries_its_clients_deadline_and_expires_after_it():
    spec = RequestSpec.build(QUERY)
    message = request_message(spec, "vm:1", deadline=1000.5)
    messages.check(messages.SCHEDULE_REQUEST, message)
    assert not expired(message, now=1000.5) and expired(message, now=1000.6)
    assert not expired(request_message(spec, "vm:1"), now=10**10)  # an older client's
    error = expired_error(message)
    assert isinstance(error, ServiceUnavailable) and error.exit_code == 3
    assert "nothing was placed" in str(error)


def test_pending_requests_come_in_arrival_order_with_their_faults():
    store = FakeStore("/p")
    good = put_request(store, request_message(RequestSpec.build(QUERY), "vm:1"))
    garbage = put_request(store, "{not json")
    unknown_field = put_request(store, {**request_message(RequestSpec.build(QUERY), "x"),
                                        "admin": True})
    bad_query = put_request(store, {**request_message(RequestSpec.build(QUERY), "x"),
                                    "query": "resources=VCPU:-1"})
    no_disk = put_request(store, {**request_message(RequestSpec.build(QUERY), "x"),
                                  "query": "resources=VCPU:1,MEMORY_MB:1"})
    huge = put_request(store, {**request_message(RequestSpec.build(QUERY), "x"),
                               "count": 10**9})
    put_request(store, request_message(RequestSpec.build(QUERY), "x"), name="../not-a-uuid")
    entries, _ = store.get_prefix(store.keys.queue_requests())
    pending = read_pending(store.keys, entries, SETTINGS)
    assert [p.uuid for p in pending] == [good, garbage, unknown_field, bad_query, no_disk,
                                         huge, ""]
    faults = {p.uuid: p.fault for p in pending}
    assert faults[good] is None and pending[0].spec.count == 1
    assert all(isinstance(faults[u], UsageError)
               for u in (garbage, unknown_field, bad_query, no_disk, huge))
    assert "not valid JSON" in str(faults[garbage])
    assert "admin" in str(faults[unknown_field])
    assert "resources" in str(faults[bad_query])
    assert "DISK_GB missing" in str(faults[no_disk])
    assert all("\n" not in str(f) for f in faults.values() if f)


def destination() -> Destination:
    return Destination(uuid=str(uuidlib.uuid4()), name="web-1", host=HOST, host_name="hv1",
                       allocations={HOST: {"resources": {"VCPU": 1}}},
                       alternates=[{"host": HOST, "allocations": {HOST: {"resources":
                                                                          {"VCPU": 1}}}}])


def test_an_answer_with_destinations_gives_them_back():
    placed = [destination(), destination()]
    answer = answer_of(placed, batch=5, conflicts=1)
    messages.check(messages.SCHEDULE_ANSWER, answer)
    assert result_of(answer) == placed
    assert (answer["batch"], answer["conflicts"]) == (5, 1)


@pytest.mark.parametrize("error", [
    NoValidHost(["resources=VCPU:100: no resource provider has 100 VCPU free"]),
    UsageError("--count 2000: expected 1..1000"),
    ConflictError("lost the race for capacity 6 times; try again", 409),
    ServiceUnavailable("Placement at https://p is unreachable"),
    EtcdComputeError("something else\nwith a second line"),
])
def test_an_error_answer_raises_what_the_direct_path_raises(error):
    answer = answer_of(error, batch=1)
    messages.check(messages.SCHEDULE_ANSWER, answer)
    with pytest.raises(EtcdComputeError) as raised:
        result_of(answer)
    assert type(raised.value) is type(error)
    assert raised.value.exit_code == error.exit_code
    assert "\n" not in str(raised.value)
    if isinstance(error, NoValidHost):
        assert raised.value.reasons == error.reasons
        assert str(raised.value) == "NO ALLOCATIONS LEFT"


def test_an_answer_is_written_only_for_the_request_as_read_and_not_yet_answered():
    store = FakeStore("/p")
    name = put_request(store, request_message(RequestSpec.build(QUERY), "x"))
    entries, _ = store.get_prefix(store.keys.queue_requests())
    (request,) = read_pending(store.keys, entries, SETTINGS)
    compares, ops = answer_ops(store.keys, request, answer_of([destination()], 1), None)
    from etcd_compute.etcd import Txn

    store.put_raw(store.keys.queue_request(name), entries[0].value)  # changed since read
    assert store.commit(Txn(compares, ops)) is None
    entries, _ = store.get_prefix(store.keys.queue_requests())
    (request,) = read_pending(store.keys, entries, SETTINGS)
    compares, ops = answer_ops(store.keys, request, answer_of([destination()], 1), None)
    assert store.commit(Txn(compares, ops)) is not None
    assert store.get(store.keys.queue_request(name)) is None
    assert store.get(store.keys.queue_answer(name)) is not None
    store.put_raw(store.keys.queue_request(name), entries[0].value)  # the same uuid again
    entries, _ = store.get_prefix(store.keys.queue_requests())
    (request,) = read_pending(store.keys, entries, SETTINGS)
    compares, ops = answer_ops(store.keys, request, answer_of([destination()], 1), None)
    assert store.commit(Txn(compares, ops)) is None  # never answered twice


def test_an_api_request_keeps_its_owner_uuids_and_view_and_a_bad_view_is_refused():
    uuids = [str(uuidlib.uuid4()) for _ in range(2)]
    server = {"project_id": "demo", "user_id": "ann", "name": "web"}
    spec = RequestSpec.build(QUERY, count=2, project_id="demo", user_id="ann", uuids=uuids,
                             server=server)
    message = request_message(spec, "api:1")
    messages.check(messages.SCHEDULE_REQUEST, message)
    again = request_spec_of(message, SETTINGS)
    assert (again.project_id, again.user_id, again.uuids, again.server) == \
        ("demo", "ann", uuids, server)
    store = FakeStore()
    put_request(store, message)
    entries, _ = store.get_prefix(store.keys.queue_requests())
    assert read_pending(store.keys, entries, SETTINGS)[0].instances == uuids
    with pytest.raises(UsageError, match="server"):
        request_spec_of({**message, "server": {**server, "name": "\x1b[2J"}}, SETTINGS)
    with pytest.raises(UsageError, match="uuids"):
        request_spec_of({**message, "uuids": uuids[:1]}, SETTINGS)


def test_the_neutron_backends_networks_and_groups_cross_the_queue():
    networks = [{"uuid": str(uuidlib.UUID(int=7))},
                {"uuid": str(uuidlib.UUID(int=7)), "fixed_ip": "10.0.0.9"},
                {"port": str(uuidlib.UUID(int=8))}]
    groups = [str(uuidlib.UUID(int=9))]
    spec = RequestSpec.build(QUERY, networks=networks, security_groups=groups)
    message = request_message(spec, "api")
    messages.check(messages.SCHEDULE_REQUEST, message)
    again = request_spec_of(message, SETTINGS)
    assert (again.networks, again.security_groups) == (networks, groups)
    assert "networks" not in request_message(RequestSpec.build(QUERY), "api")

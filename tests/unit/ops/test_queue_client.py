"""schedule.py's side of the queue against an in-memory etcd with watches: write only when a
service takes requests, return its answer, withdraw when it is gone or silent."""

from __future__ import annotations

import threading
import time
from types import SimpleNamespace

import pytest

from etcd_compute import messages
from etcd_compute.config import SCHEDULE_DEFAULTS, deep_merge
from etcd_compute.errors import NoValidHost, ServiceUnavailable
from etcd_compute.etcd import Delete, Put, Txn, put_message
from etcd_compute.ops import queue_client
from etcd_compute.ops.queue_client import QueueClient
from etcd_compute.scheduler.queue import answer_of, instance_uuids
from etcd_compute.scheduler.spec import Destination, RequestSpec
from tests.unit.fakes import WatchingFakeStore

SETTINGS = deep_merge(SCHEDULE_DEFAULTS, {"scheduler": {"wait_timeout_seconds": 5}})["scheduler"]
SPEC = RequestSpec.build("resources=VCPU:1,MEMORY_MB:256,DISK_GB:1")
HOST = "00000000-0000-0000-0000-00000000000a"
PLACED = Destination(uuid="1" * 8 + "-1111-4111-8111-" + "1" * 12, name="i", host=HOST,
                     host_name="hv1", allocations={HOST: {"resources": {"VCPU": 1}}})


class FlakyStore(WatchingFakeStore):
    """etcd that cannot be reached while `down` (reads and writes raise, as a lost quorum
    does); `applied_then_lost`: the next write is applied, then its answer lost."""

    def __init__(self, prefix: str):
        super().__init__(prefix)
        self.down = False
        self.applied_then_lost = False

    def get(self, key):
        if self.down:
            raise ServiceUnavailable("etcd at x is unreachable (no answer in time)")
        return super().get(key)

    def commit(self, txn):
        if self.down:
            raise ServiceUnavailable("etcd at x is unreachable (no answer in time)")
        revision = super().commit(txn)
        if self.applied_then_lost:
            self.applied_then_lost = False
            raise ServiceUnavailable("etcd at x is unreachable (no answer in time)")
        return revision


def request_names(store) -> list[str]:
    return [e.key.rsplit("/", 1)[-1] for e in store.get_prefix(store.keys.queue_requests())[0]]


def answer(store, name: str, message: dict) -> None:
    """What the service does: the answer and the request's deletion in one transaction."""
    store.commit(Txn([], [Delete(store.keys.queue_request(name)),
                          put_message(messages.SCHEDULE_ANSWER, store.keys.queue_answer(name),
                                      message)]))



@pytest.fixture(autouse=True)
def quick_checks(monkeypatch):
    monkeypatch.setattr(queue_client, "CHECK_SECONDS", 0.01)


def open_queue(store: WatchingFakeStore) -> None:
    store.put(messages.QUEUE_OPEN, store.keys.queue_open(), {"name": "serve", "since": 1.0})


def answer_when_asked(store: WatchingFakeStore, answer: dict) -> threading.Thread:
    """A service stand-in: answers the first request it sees, as the service does."""

    def serve() -> None:
        for _ in range(500):
            entries, _ = store.get_prefix(store.keys.queue_requests())
            if entries:
                name = entries[0].key.rsplit("/", 1)[-1]
                store.delete(entries[0].key)
                store.put(messages.SCHEDULE_ANSWER, store.keys.queue_answer(name), answer)
                return
            time.sleep(0.005)

    thread = threading.Thread(target=serve)
    thread.start()
    return thread


def test_without_a_service_nothing_is_written_and_the_caller_schedules():
    store = WatchingFakeStore("/p")
    assert QueueClient(store, SETTINGS).schedule(SPEC) is None
    assert store.get_prefix(store.keys.queue())[0] == []


def test_the_answer_comes_back_and_is_removed():
    store = WatchingFakeStore("/p")
    open_queue(store)
    placed = Destination(uuid="1" * 8 + "-1111-4111-8111-" + "1" * 12, name="i", host=HOST,
                         host_name="hv1", allocations={HOST: {"resources": {"VCPU": 1}}})
    service = answer_when_asked(store, answer_of([placed], 3, conflicts=2))
    client = QueueClient(store, SETTINGS)
    assert client.schedule(SPEC) == [placed]
    service.join()
    assert client.conflicts == 2
    assert store.get_prefix(store.keys.queue())[0][0].key == store.keys.queue_open()
    assert len(store.get_prefix(store.keys.queue())[0]) == 1  # request and answer gone


def test_an_answer_written_before_the_watch_started_is_not_missed(monkeypatch):
    store = WatchingFakeStore("/p")
    open_queue(store)

    class LateWatch(queue_client.PrefixWatch):
        def start(self):
            entries, _ = store.get_prefix(store.keys.queue_requests())
            name = entries[0].key.rsplit("/", 1)[-1]
            store.delete(entries[0].key)
            store.put(messages.SCHEDULE_ANSWER, store.keys.queue_answer(name),
                      answer_of(NoValidHost(["why"]), 1))
            return super().start()

    monkeypatch.setattr(queue_client, "PrefixWatch", LateWatch)
    with pytest.raises(NoValidHost) as raised:
        QueueClient(store, SETTINGS).schedule(SPEC)
    assert raised.value.reasons == ["why"]


def test_when_the_service_goes_away_the_request_is_withdrawn_and_the_caller_schedules():
    store = WatchingFakeStore("/p")
    open_queue(store)
    client = QueueClient(store, SETTINGS)
    client.fallback_after = 0.05
    threading.Timer(0.05, lambda: store.delete(store.keys.queue_open())).start()
    assert client.schedule(SPEC) is None
    assert store.get_prefix(store.keys.queue_requests())[0] == []


def test_a_silent_service_is_a_one_line_unavailable_error_and_the_request_is_withdrawn():
    store = WatchingFakeStore("/p")
    open_queue(store)
    client = QueueClient(store, SETTINGS)
    client.timeout = 0.1
    with pytest.raises(ServiceUnavailable, match="did not answer within 0.1 s"):
        client.schedule(SPEC)
    assert store.get_prefix(store.keys.queue_requests())[0] == []


# --- etcd failing while the client waits: nothing left behind ----------------------------


def test_etcd_failing_while_the_client_waits_does_not_end_the_wait(monkeypatch):
    """It used to exit 3 at the first failed read, leaving its request for the service to
    place later: an instance its caller was told had failed."""
    store = FlakyStore("/p")
    open_queue(store)
    client = QueueClient(store, SETTINGS)

    def outage_then_answer():
        wait_for_request = time.monotonic() + 5
        while not request_names(store) and time.monotonic() < wait_for_request:
            time.sleep(0.005)
        store.down = True
        time.sleep(0.1)  # the client's checks fail meanwhile
        store.down = False
        answer(store, request_names(store)[0], answer_of([PLACED], 1))

    threading.Thread(target=outage_then_answer).start()
    assert client.schedule(SPEC) == [PLACED]


def test_giving_up_with_etcd_unreachable_waits_out_the_deadline_and_says_nothing_was_placed(
        monkeypatch):
    store = FlakyStore("/p")
    open_queue(store)
    monkeypatch.setattr(queue_client, "CLOCK_SKEW_SECONDS", 0.2)
    client = QueueClient(store, SETTINGS)
    client.timeout = 0.2
    client.sleep = lambda _s: None
    real_clock = client.clock
    threading.Timer(0.05, lambda: setattr(store, "down", True)).start()
    started = real_clock()
    with pytest.raises(ServiceUnavailable, match="nothing was placed") as raised:
        client.schedule(SPEC)
    assert raised.value.exit_code == 3
    assert real_clock() - started >= 0.2 + 0.2  # past the deadline and the skew
    store.down = False
    (name,) = request_names(store)  # left (it could not be withdrawn): expired, though
    message, _ = store.read(messages.SCHEDULE_REQUEST, store.keys.queue_request(name))
    assert message["deadline"] < real_clock()


def test_an_answer_that_came_as_the_client_gave_up_is_taken():
    store = FlakyStore("/p")
    open_queue(store)
    client = QueueClient(store, SETTINGS)
    client.timeout = 0.05
    real_withdraw = client._withdraw

    def answered_first(request_uuid):  # the service's transaction won the race
        answer(store, request_uuid, answer_of([PLACED], 1))
        return real_withdraw(request_uuid)

    client._withdraw = answered_first
    assert client.schedule(SPEC) == [PLACED]
    assert store.get(store.keys.queue_answer(_only_request(store))) is None


def test_a_request_write_whose_outcome_is_lost_is_withdrawn_before_exit_3():
    store = FlakyStore("/p")
    open_queue(store)
    store.applied_then_lost = True
    with pytest.raises(ServiceUnavailable, match="unreachable"):
        QueueClient(store, SETTINGS).schedule(SPEC)
    assert request_names(store) == []


def test_etcd_unreachable_before_anything_is_written_is_exit_3_at_once():
    store = FlakyStore("/p")
    open_queue(store)
    store.down = True
    with pytest.raises(ServiceUnavailable):
        QueueClient(store, SETTINGS).schedule(SPEC)
    store.down = False
    assert request_names(store) == []


def test_an_unreadable_answer_has_its_instances_taken_back(monkeypatch):
    store = WatchingFakeStore("/p")
    open_queue(store)
    taken: list[list[str]] = []
    monkeypatch.setattr(queue_client, "take_back",
                        lambda _store, _placement, uuids, _ops: taken.append(uuids)
                        or SimpleNamespace(left=[]))
    client = QueueClient(store, SETTINGS, placement=lambda: "placement")

    def garbage():
        deadline = time.monotonic() + 5
        while not request_names(store) and time.monotonic() < deadline:
            time.sleep(0.005)
        name = request_names(store)[0]
        store.commit(Txn([], [Delete(store.keys.queue_request(name)),
                              Put(store.keys.queue_answer(name), "{not json")]))

    threading.Thread(target=garbage).start()
    with pytest.raises(ServiceUnavailable, match="its instances were taken back"):
        client.schedule(SPEC)
    (uuids,) = taken
    assert uuids == instance_uuids(_only_request(store), 1)


def _only_request(store) -> str:
    """The request uuid the client used (its answer key is gone; its instance uuid is
    derived from it: recompute from what the fake saw)."""
    for txn in store.committed:
        for op in txn.success:
            if op.key.startswith(store.keys.queue_requests()):
                return op.key.rsplit("/", 1)[-1]
    raise AssertionError("no request was written")

"""schedule.py's side of the queue against an in-memory etcd with watches: write only when a
service takes requests, return its answer, withdraw when it is gone or silent."""

from __future__ import annotations

import threading
import time

import pytest

from etcd_compute import messages
from etcd_compute.config import SCHEDULE_DEFAULTS, deep_merge
from etcd_compute.errors import NoValidHost, ServiceUnavailable
from etcd_compute.ops import queue_client
from etcd_compute.ops.queue_client import QueueClient
from etcd_compute.scheduler.queue import answer_of
from etcd_compute.scheduler.spec import Destination, RequestSpec
from tests.unit.fakes import WatchingFakeStore

SETTINGS = deep_merge(SCHEDULE_DEFAULTS, {"scheduler": {"wait_timeout_seconds": 5}})["scheduler"]
SPEC = RequestSpec.build("resources=VCPU:1,MEMORY_MB:256,DISK_GB:1")
HOST = "00000000-0000-0000-0000-00000000000a"


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


def test_an_answer_written_before_the_watch_started_is_not_missed():
    store = WatchingFakeStore("/p")
    open_queue(store)
    real_watch = QueueClient._watch

    def late_watch(self, key, revision, events):
        entries, _ = store.get_prefix(store.keys.queue_requests())
        name = entries[0].key.rsplit("/", 1)[-1]
        store.delete(entries[0].key)
        store.put(messages.SCHEDULE_ANSWER, store.keys.queue_answer(name),
                  answer_of(NoValidHost(["why"]), 1))
        return real_watch(self, key, revision, events)

    QueueClient._watch = late_watch
    try:
        with pytest.raises(NoValidHost) as raised:
            QueueClient(store, SETTINGS).schedule(SPEC)
    finally:
        QueueClient._watch = real_watch
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

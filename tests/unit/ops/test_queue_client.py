"""schedule.py's side of the queue against an in-memory etcd with watches: write only when a
service takes requests, return its answer, withdraw when it is gone or silent."""

from __future__ import annotations

import threading
import time
from types import SimpleNamespace
from typing import Any

import pytest

from etcd_compute import messages
from etcd_compute.config import deep_merge
from etcd_compute.defaults import SCHEDULE_DEFAULTS
from etcd_compute.errors import NoValidHost, ServiceUnavailable
from etcd_compute.etcd import Delete, Put, Txn, put_message
from etcd_compute.ops import queue_client
from etcd_compute.ops.queue_client import CHECK_SECONDS, QueueClient
from etcd_compute.scheduler.queue import CLOCK_SKEW_SECONDS, answer_of, instance_uuids
from etcd_compute.scheduler.spec import Destination, RequestSpec
from tests.unit.fake_clock import FakeClock
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



class Asking:
    """`client.schedule(SPEC)` in a thread of its own, on the client's clock: the test moves
    the clock and looks at the outcome."""

    def __init__(self, client: QueueClient):
        self.outcome: list[Any] = []
        self.thread = threading.Thread(target=self._run, args=(client,), daemon=True)
        self.thread.start()
        client.clock.waiters(1)  # the request written, its answer waited for

    def _run(self, client: QueueClient) -> None:
        try:
            self.outcome.append(client.schedule(SPEC))
        except Exception as exc:  # noqa: BLE001 (the test looks at it)
            self.outcome.append(exc)

    @property
    def done(self) -> bool:
        return not self.thread.is_alive()

    def result(self) -> Any:
        self.thread.join(5)
        assert self.done, "the client is still waiting"
        (outcome,) = self.outcome
        if isinstance(outcome, Exception):
            raise outcome
        return outcome


def on_a_clock(store: WatchingFakeStore, **kwargs: Any) -> QueueClient:
    return QueueClient(store, SETTINGS, clock=FakeClock(), **kwargs)


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
    client = on_a_clock(store)
    client.fallback_after = 2.0  # (a standby's lease TTL twice, and more: 25 s by default)
    asking = Asking(client)
    store.delete(store.keys.queue_open())  # no service takes requests now
    # Given a standby's time to take over, looked at every CHECK_SECONDS: withdrawn.
    took = client.clock.advance_until(lambda: asking.done, within=60)
    assert client.fallback_after < took <= client.fallback_after + 2 * CHECK_SECONDS
    assert asking.result() is None
    assert store.get_prefix(store.keys.queue_requests())[0] == []


def test_a_silent_service_is_a_one_line_unavailable_error_and_the_request_is_withdrawn():
    store = WatchingFakeStore("/p")
    open_queue(store)
    client = on_a_clock(store)
    asking = Asking(client)
    took = client.clock.advance_until(lambda: asking.done, within=60)
    assert client.timeout < took <= client.timeout + CHECK_SECONDS
    with pytest.raises(ServiceUnavailable, match="did not answer within 5 s"):
        asking.result()
    assert store.get_prefix(store.keys.queue_requests())[0] == []


# --- etcd failing while the client waits: nothing left behind ----------------------------


def test_etcd_failing_while_the_client_waits_does_not_end_the_wait(monkeypatch):
    """It used to exit 3 at the first failed read, leaving its request for the service to
    place later: an instance its caller was told had failed."""
    store = FlakyStore("/p")
    open_queue(store)
    client = on_a_clock(store)
    asking = Asking(client)
    store.down = True
    client.clock.advance(3 * CHECK_SECONDS)  # the client's checks fail meanwhile
    assert not asking.done
    store.down = False
    answer(store, request_names(store)[0], answer_of([PLACED], 1))
    assert asking.result() == [PLACED]


def test_giving_up_with_etcd_unreachable_waits_out_the_deadline_and_says_nothing_was_placed():
    store = FlakyStore("/p")
    open_queue(store)
    client = on_a_clock(store)
    asking = Asking(client)
    store.down = True
    took = client.clock.advance_until(lambda: asking.done, within=60)
    # Past the deadline and the clock skew allowed: the service places nothing after.
    assert client.timeout + CLOCK_SKEW_SECONDS < took <= \
        client.timeout + CLOCK_SKEW_SECONDS + 2 * CHECK_SECONDS
    with pytest.raises(ServiceUnavailable, match="nothing was placed") as raised:
        asking.result()
    assert raised.value.exit_code == 3
    store.down = False
    (name,) = request_names(store)  # left (it could not be withdrawn): expired, though
    message, _ = store.read(messages.SCHEDULE_REQUEST, store.keys.queue_request(name))
    assert message["deadline"] + CLOCK_SKEW_SECONDS < client.clock.wall()


def test_an_answer_that_came_as_the_client_gave_up_is_taken():
    store = FlakyStore("/p")
    open_queue(store)
    client = on_a_clock(store)
    real_withdraw = client._withdraw

    def answered_first(request_uuid):  # the service's transaction won the race
        answer(store, request_uuid, answer_of([PLACED], 1))
        return real_withdraw(request_uuid)

    client._withdraw = answered_first
    asking = Asking(client)
    client.clock.advance_until(lambda: asking.done, within=60)  # the deadline passes
    assert asking.result() == [PLACED]
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

"""`console --follow`: what is new in a tail, when a follow ends, and the follow itself over
an in-memory store whose watches deliver its writes the way etcd's do."""

from __future__ import annotations

import queue
import threading
import time
import uuid as uuidlib
from typing import Any

import pyetcd.exceptions
import pytest
from pyetcd.etcdrpc import kv_pb2
from pyetcd.events import new_event

from etcd_compute import messages
from etcd_compute.errors import NotFound, UsageError
from etcd_compute.etcd import Delete, Put, Txn
from etcd_compute.instances import records, scheduling
from etcd_compute.ops import console_follow
from etcd_compute.ops.console_follow import (
    ANCHOR_CHARS,
    RESTARTED,
    ConsoleFollower,
    Update,
    ending,
    tail_update,
)
from tests.support import make_spec, wait_for
from tests.unit.fakes import FakeStore

A, B = str(uuidlib.UUID(int=0xA)), str(uuidlib.UUID(int=0xB))


@pytest.fixture(autouse=True)
def quick(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(console_follow, "POLL_SECONDS", 0.02)
    monkeypatch.setattr(console_follow, "RETRY_SECONDS", 0.05)

# --- what is new ------------------------------------------------------------------------------


def test_the_first_tail_is_shown_whole_and_a_grown_one_by_its_new_part():
    assert tail_update(None, "boot\n", False) == Update("boot\n")
    assert tail_update("boot\n", "boot\nlogin: ", False) == Update("login: ")
    assert tail_update("boot\n", "boot\n", True) == Update("")


def test_a_tail_that_does_not_continue_is_restarted_whole():
    assert tail_update("boot\nlogin: ", "fresh log\n", False) == Update("fresh log\n", True)
    # Short text cannot have slid out of a 64 KiB window, truncated or not.
    assert tail_update("abc", "bcd", True) == Update("bcd", True)


def test_a_slid_window_continues_after_the_last_kib_shown():
    old = "".join(f"line {i}\n" for i in range(2000))  # ~17 KiB
    new = old[5000:] + "line 2000\nline 2001\n"
    assert tail_update(old, new, True) == Update("line 2000\nline 2001\n")
    # The same text, not said to be cut: the compute's word is what counts.
    assert tail_update(old, new, False) == Update(new, True)
    # More than a window written between two updates: the last KiB shown is not in it.
    assert tail_update(old, "x" * (ANCHOR_CHARS * 2), True).restarted


def test_a_cut_that_splits_a_character_still_continues():
    old = "".join(f"línea {i}\n" for i in range(400))
    cut = old.index("línea 100") + 1  # the window began inside "í", decoded as U+FFFD
    new = "\ufffd" + old[cut + 1:] + "new"
    assert tail_update(old, new, True) == Update("new")


def test_ending_is_deleted_or_gone_with_0_and_error_with_1():
    assert ending(A, {"state": "ACTIVE"}) is None
    assert ending(A, {"state": "DELETING"}) is None
    assert ending(A, None) == (0, f"--- instance {A} is gone: end of its console ---")
    assert ending(A, {"state": "DELETED"}) == (0, f"--- instance {A} DELETED: end of its "
                                                  "console ---")
    status, line = ending(A, {"state": "ERROR", "error": "disk on fire"})
    assert status == 1 and "ERROR (disk on fire)" in line


# --- the follow -----------------------------------------------------------------------------


class WatchedStore(FakeStore):
    """FakeStore whose commits reach watches on single keys, from a start revision, through
    `client.add_watch_callback` (as pyetcd delivers etcd's watch responses)."""

    def __init__(self) -> None:
        super().__init__("/t")
        self.history: list[tuple[int, Any]] = []
        self.watches: dict[int, tuple[str, Any]] = {}
        self.next_id = 0
        self.compacted = 0
        self.client = self

    def commit(self, txn: Txn) -> int | None:
        existed = {op.key for op in txn.success if isinstance(op, Delete)
                   and op.key in self.entries}
        revision = super().commit(txn)
        if revision is None:
            return None
        for op in txn.success:
            if isinstance(op, Put):
                raw = kv_pb2.Event(type=kv_pb2.Event.PUT, kv=kv_pb2.KeyValue(
                    key=op.key.encode(), value=self.entries[op.key].value,
                    mod_revision=self.revision, version=self.versions[op.key]))
            elif op.key in existed:
                raw = kv_pb2.Event(type=kv_pb2.Event.DELETE, kv=kv_pb2.KeyValue(
                    key=op.key.encode(), mod_revision=self.revision))
            else:
                continue
            event = new_event(raw)
            self.history.append((self.revision, event))
            for key, callback in list(self.watches.values()):
                if key == op.key:
                    callback(type("Response", (), {"events": [event]})())
        return revision

    def add_watch_callback(self, key: str, callback: Any, start_revision: int) -> int:
        if start_revision <= self.compacted:
            raise pyetcd.exceptions.RevisionCompactedError(self.compacted)
        self.next_id += 1
        self.watches[self.next_id] = (key, callback)
        for revision, event in self.history:
            if revision >= start_revision and event.key.decode() == key:
                callback(type("Response", (), {"events": [event]})())
        return self.next_id

    def cancel_watch(self, watch_id: int) -> None:
        self.watches.pop(watch_id, None)

    def watch_prefix_response(self, key: str, start_revision: int = 0,
                              progress_notify: bool = False) -> tuple[Any, Any]:
        """pyetcd's stream over the same callbacks (what `watching.PrefixWatch` uses)."""
        responses: queue.Queue[Any] = queue.Queue()
        watch_id = self.add_watch_callback(key, responses.put, start_revision)

        def cancel() -> None:
            self.cancel_watch(watch_id)
            responses.put(None)

        def stream() -> Any:
            while (item := responses.get()) is not None:
                if isinstance(item, BaseException):
                    raise item
                yield item
        return stream(), cancel

    def break_watches(self, error: BaseException | None) -> None:
        """The stream broke: every callback gets the error (pyetcd's behaviour)."""
        watches, self.watches = self.watches, {}
        for _key, callback in watches.values():
            callback(error)


class Recorder:
    def __init__(self) -> None:
        self.out: list[tuple[str, Any]] = []
        self.notes: list[str] = []

    def text(self, text: str) -> None:
        self.out.append(("text", text))

    def restarted(self) -> None:
        self.out.append(("restarted", RESTARTED))

    def ended(self, status: int, line: str) -> None:
        self.out.append(("ended", status))

    def note(self, line: str) -> None:
        self.notes.append(line)

    def texts(self) -> str:
        return "".join(text for kind, text in self.out if kind == "text")


class Follow:
    """A follow running in a thread over a WatchedStore, and steps that read like the story."""

    def __init__(self, state: str = "ACTIVE", console: str | None = "boot\n", host: str = A):
        self.store, self.sink, self.stopping = WatchedStore(), Recorder(), threading.Event()
        self.spec = make_spec(host)
        self.uuid = self.spec["uuid"]
        scheduling.schedule(self.store, [(self.spec, "host-a")])
        self.set_state(state, host)
        if console is not None:
            self.console(console, host)
        self.status: int | None = None
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        self.status = ConsoleFollower(self.store, self.uuid, self.sink, self.stopping).run()

    def set_state(self, state: str, host: str = A, **fields: Any) -> None:
        read = records.read_record(self.store, host, self.uuid)
        record = {**(read.record or records.new_record({**self.spec, "host": host},
                                                         "SCHEDULED")),
                  "state": state, "host": host, **fields}
        self.store.put(messages.INSTANCE_RECORD, self.store.keys.record(host, self.uuid), record)

    def console(self, text: str, host: str = A, truncated: bool = False) -> None:
        self.store.put(messages.CONSOLE, self.store.keys.console(host, self.uuid),
                       {"uuid": self.uuid, "text": text, "updated_at": time.time(),
                        "truncated": truncated})

    def shows(self, text: str) -> None:
        wait_for(lambda: self.sink.texts() == text, 5, 0.01, what=f"{text!r} shown")

    def ends(self, status: int) -> None:
        self.thread.join(5)
        assert not self.thread.is_alive(), "the follow did not end"
        assert self.status == status and self.sink.out[-1] == ("ended", status)

    def stop(self) -> None:
        self.stopping.set()
        self.thread.join(5)


def test_it_shows_the_tail_then_only_what_is_new_until_deleted():
    follow = Follow()
    follow.shows("boot\n")
    follow.console("boot\nlogin: ")
    follow.shows("boot\nlogin: ")
    follow.console("boot\nlogin: ")  # republished unchanged: nothing
    follow.set_state("DELETING")
    follow.store.delete(follow.store.keys.console(A, follow.uuid))  # the host drops it
    follow.set_state("DELETED")
    follow.ends(0)
    assert follow.sink.out == [("text", "boot\n"), ("text", "login: "), ("ended", 0)]
    assert follow.sink.notes == []  # the watches delivered it all: no loss, no re-read


def test_a_rotated_tail_is_marked_and_shown_whole():
    follow = Follow()
    follow.shows("boot\n")
    follow.console("a new log\n")
    follow.shows("boot\na new log\n")
    assert ("restarted", RESTARTED) in follow.sink.out
    follow.stop()
    assert follow.status == 0


def test_error_ends_with_1_and_a_record_removed_for_good_with_0():
    failing = Follow()
    failing.shows("boot\n")
    failing.set_state("ERROR", error="guest crashed")
    failing.ends(1)
    removed = Follow()
    removed.shows("boot\n")
    removed.store.delete(removed.store.keys.record(A, removed.uuid))
    removed.store.delete(removed.store.keys.location(removed.uuid))
    removed.ends(0)


def test_a_deletion_that_also_removes_the_console_in_one_transaction_ends_it():
    # One revision changes both keys; here the console's watch delivers first (etcd gives
    # no order between two watches).
    follow = Follow()
    follow.shows("boot\n")
    read = records.read_record(follow.store, A, follow.uuid)
    follow.store.commit(Txn([], [
        Delete(follow.store.keys.console(A, follow.uuid)),
        Put(follow.store.keys.record(A, follow.uuid),
            messages.encode(messages.INSTANCE_RECORD, {**read.record, "state": "DELETED"}))]))
    follow.ends(0)


def test_it_waits_for_an_instance_being_built_and_follows_it_to_another_host():
    follow = Follow(state="BUILDING", console=None)
    wait_for(lambda: follow.sink.notes, 5, 0.01, what="a note")
    assert "waiting for the console" in follow.sink.notes[0]
    assert "state BUILDING" in follow.sink.notes[0]
    # Rescheduled: the record leaves A, the location and record are B's now.
    follow.store.commit(Txn([], [
        Delete(follow.store.keys.record(A, follow.uuid)),
        Put(follow.store.keys.location(follow.uuid),
            messages.encode(messages.INSTANCE_LOCATION, {"host": B, "group": None}))]))
    follow.set_state("SCHEDULED", host=B)
    follow.set_state("ACTIVE", host=B)
    follow.console("booted on B\n", host=B)
    follow.shows("booted on B\n")
    follow.set_state("DELETED", host=B)
    follow.ends(0)


def test_a_lost_watch_resumes_from_the_last_revision_without_loss_or_repeat():
    follow = Follow()
    follow.shows("boot\n")
    wait_for(lambda: len(follow.store.watches) == 2, 5, 0.01, what="both watches")
    follow.store.break_watches(pyetcd.exceptions.ConnectionFailedError())
    follow.console("boot\none\n")  # written while no watch is there
    follow.shows("boot\none\n")
    follow.console("boot\none\ntwo\n")
    follow.shows("boot\none\ntwo\n")
    assert any("console watch" in note and "lost" in note for note in follow.sink.notes), \
        follow.sink.notes
    follow.stop()


def test_compacted_history_is_read_again():
    follow = Follow()
    follow.shows("boot\n")
    wait_for(lambda: len(follow.store.watches) == 2, 5, 0.01, what="both watches")
    follow.store.compacted = follow.store.revision + 5
    follow.store.break_watches(pyetcd.exceptions.RevisionCompactedError(follow.store.compacted))
    follow.console("boot\nafter compaction\n")
    follow.store.compacted = 0  # the re-read watches from now on
    follow.shows("boot\nafter compaction\n")
    follow.stop()


def test_stopping_ends_it_with_0_and_nothing_more():
    follow = Follow()
    follow.shows("boot\n")
    follow.stop()
    assert not follow.thread.is_alive() and follow.status == 0
    assert follow.sink.out == [("text", "boot\n")]


def test_an_unknown_instance_or_a_non_uuid_is_refused():
    with pytest.raises(NotFound, match="no instance"):
        ConsoleFollower(WatchedStore(), A, Recorder(), threading.Event()).run()
    with pytest.raises(UsageError, match="is not an instance uuid"):
        ConsoleFollower(WatchedStore(), "web-1", Recorder(), threading.Event())

"""An instance's events (events.py): entries started and ended, bounded, one line each."""

from __future__ import annotations

import uuid as uuidlib

from etcd_compute import events, messages
from etcd_compute.keys import Keys
from tests.unit.fakes import FakeStore

HOST, UUID = str(uuidlib.uuid4()), str(uuidlib.uuid4())


def test_an_entry_runs_until_it_ends_and_a_finished_one_is_ended_now():
    running = events.event("stop", HOST, "h", by="ann@desk", request_id=UUID)
    assert running["result"] == "running" and running["ended_at"] is None
    done = events.event("power-off", HOST, result=events.SUCCESS, detail="shut down")
    assert done["ended_at"] >= done["started_at"]


def test_end_ends_the_running_entry_of_its_action_and_supersedes_another():
    log = [events.event("resize", HOST)]
    ended = events.end(log, "resize", events.ERROR, "no room")
    assert (ended[0]["result"], ended[0]["error"]) == ("error", "no room")
    # Ending a destroy while a resize runs: the resize was cut short.
    log = events.end([events.event("resize", HOST)], "destroy", events.SUCCESS,
                     otherwise=events.event("destroy", HOST))
    assert [(e["action"], e["result"]) for e in log] == [("resize", "error"),
                                                        ("destroy", "success")]
    assert log[0]["error"] == "superseded by destroy"
    assert events.end([], "stop", events.SUCCESS) == []  # nothing running, nothing given


def test_texts_are_one_bounded_line_and_details_printable():
    entry = events.event("stop", HOST, result=events.ERROR, error="a\nb\x1b[31m" + "x" * 5000,
                         detail="c\x07d", by="\x1b" * 300)
    assert "\n" not in entry["error"] and len(entry["error"]) == events.MAX_TEXT
    assert entry["detail"] == "c?d" and len(entry["by"]) <= 255
    messages.check(messages.INSTANCE_EVENTS, {"uuid": UUID, "events": [entry]})


def test_only_the_last_entries_are_kept_and_read_back():
    store = FakeStore()
    log: list = []
    for index in range(events.MAX_EVENTS + 5):
        log = events.append(log, events.event("reboot", HOST, detail=str(index),
                                              result=events.SUCCESS))
    op = events.put(store.keys, HOST, UUID, log)
    store.put_raw(op.key, op.value)
    read = events.read(store, HOST, UUID)
    assert len(read) == events.MAX_EVENTS and read[0]["detail"] == "5"


def test_an_unreadable_log_reads_as_empty_and_its_key_is_the_hosts():
    store = FakeStore()
    store.put_raw(Keys().events(HOST, UUID), "{not json")
    assert events.read(store, HOST, UUID) == []
    assert Keys("/p").events(HOST, UUID).startswith(Keys("/p").host(HOST))

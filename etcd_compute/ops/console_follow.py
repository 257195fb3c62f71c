"""`schedule.py console UUID --follow`: a guest's console as its compute publishes it.

The compute republishes the tail of the guest's serial log (its last 64 KiB)
when the instance becomes ACTIVE and every few seconds while it changes, during
its first minutes (`compute/consoles.py`). Following prints the tail once, then
only what is new at each update, as etcd's watch on the instance's console and
record keys delivers them (no polling), until it is stopped (Ctrl-C or SIGTERM:
status 0) or the instance is gone: DELETED or no record left (status 0), or
ERROR (status 1), each with a last line.

An update that does not continue what was printed (`tail_update`): when the
tail was cut to its last 64 KiB and the last KiB printed is in it, the window
slid while the guest wrote and what follows that KiB is new; otherwise (the log
was truncated or rotated, or more than a window was written between two
updates) a marker line, then the whole new tail.

An instance that moves to another host before it is ACTIVE (a reschedule) is
followed there. If etcd goes away, the watch resumes from the last revision
seen; if etcd compacted that history, everything is read again (the watches are
`watching.PrefixWatch`es, as every watch of ours).
"""

from __future__ import annotations

import queue
import threading
from dataclasses import dataclass
from typing import Any, Protocol

import pyetcd.events

from etcd_compute import messages
from etcd_compute.errors import InvalidMessage, NotFound
from etcd_compute.etcd import Store
from etcd_compute.instances import records, states
from etcd_compute.ops.operations import check_uuid
from etcd_compute.watching import Cancelled, PrefixWatch

# How much of what was printed must reappear in a cut tail for it to count as continued.
ANCHOR_CHARS = 1024
RESTARTED = "--- console restarted (truncated or rotated); the whole tail follows ---"
# How often the follow looks at its stop flag, and waits before it resumes a lost watch.
POLL_SECONDS = 0.5
RETRY_SECONDS = 1.0


@dataclass(frozen=True)
class Update:
    """What to print for a new tail: `text`, after the marker line if `restarted`."""

    text: str
    restarted: bool = False


def tail_update(old: str | None, new: str, truncated: bool) -> Update:
    """What is new in `new` after `old` (None: nothing printed yet). `truncated`: `new` is
    the last window of a longer log, as the compute says."""
    if old is None:
        return Update(new)
    if new.startswith(old):
        return Update(new[len(old):])
    if truncated and len(old) >= ANCHOR_CHARS:
        anchor = old[-ANCHOR_CHARS:]
        at = new.find(anchor)
        if at >= 0:
            return Update(new[at + len(anchor):])
    return Update(new, restarted=True)


def ending(uuid: str, record: dict[str, Any] | None) -> tuple[int, str] | None:
    """(exit status, last line) when `record` ends the follow, else None."""
    if record is None:
        return 0, f"--- instance {uuid} is gone: end of its console ---"
    if record["state"] == states.DELETED:
        return 0, f"--- instance {uuid} DELETED: end of its console ---"
    if record["state"] == states.ERROR:
        return 1, (f"--- instance {uuid} ERROR ({record.get('error') or 'no reason given'}): "
                   "end of its console ---")
    return None


# What `_watch` returns when the instance must be looked up again (moved, or history lost).
AGAIN = None


class Sink(Protocol):
    """Where a follow's output goes (the CLI prints it for a terminal, or as JSON lines)."""

    def text(self, text: str) -> None:
        """New console text, as the guest wrote it (escaping is the sink's business)."""

    def restarted(self) -> None:
        """The whole new tail follows (`RESTARTED`)."""

    def ended(self, status: int, line: str) -> None:
        """The instance is gone or failed: the last line, and the exit status."""

    def note(self, line: str) -> None:
        """What the follow waits for (not console text)."""


class ConsoleFollower:
    """Follows one instance's console into `sink` until `stopping` is set or it ends."""

    def __init__(self, store: Store, uuid: str, sink: Sink, stopping: threading.Event):
        self.store, self.keys = store, store.keys
        self.uuid = check_uuid(uuid)
        self.sink, self.stopping = sink, stopping
        self.printed: str | None = None  # the tail as last shown
        self.noted: str | None = None

    def show(self, message: dict[str, Any] | None) -> None:
        """Show what is new in a published console message."""
        if message is None:
            return
        update = tail_update(self.printed, message["text"], bool(message.get("truncated")))
        if update.restarted:
            self.sink.restarted()
        if update.text:
            self.sink.text(update.text)
        self.printed = message["text"]

    def _finish(self, record: dict[str, Any] | None) -> int | None:
        end = ending(self.uuid, record)
        if end is None:
            return None
        self.sink.ended(*end)
        return end[0]

    # --- reading and watching ---------------------------------------------------------

    def run(self) -> int:
        host, read = records.find(self.store, self.uuid)
        if host is None or (read.record is None and read.fault is None):
            raise NotFound(f"no instance {self.uuid}")
        while not self.stopping.is_set():
            revision, record = self._read(host)
            if record is None:
                moved, _ = records.find(self.store, self.uuid)
                if moved is not None and moved != host:
                    host = moved
                    continue
            status = self._finish(record)
            if status is not None:
                return status
            status = self._watch(host, revision)
            if status is not AGAIN:
                return status
        return 0

    def _read(self, host: str) -> tuple[int, dict[str, Any] | None]:
        """Print the console as it is now; (revision read at, record or None)."""
        entries, revision = self.store.get_prefix(self.keys.record(host, self.uuid))
        entry = next((e for e in entries if e.key == self.keys.record(host, self.uuid)), None)
        record = self._decode(messages.INSTANCE_RECORD, entry.value) if entry else None
        console = self.store.get(self.keys.console(host, self.uuid))
        message = self._decode(messages.CONSOLE, console.value) if console else None
        self.show(message)
        if message is None and record is not None and self.printed is None and \
                record["state"] != self.noted:
            self.noted = record["state"]
            self.sink.note(f"waiting for the console of {self.uuid} (state {record['state']}; the "
                      "compute publishes it once the instance is ACTIVE)")
        if entry is not None and record is None:
            record = {"state": "unreadable"}  # a garbled record is still there: keep going
        return revision, record

    @staticmethod
    def _decode(schema: str, raw: bytes) -> dict[str, Any] | None:
        try:
            return messages.decode(schema, raw)
        except InvalidMessage:
            return None

    def _watch(self, host: str, revision: int) -> int | None:
        """Follow `host`'s keys of the instance from `revision` + 1: an exit status, or
        AGAIN (look it up and read it again). One `watching.PrefixWatch` per key: a lost
        stream resumes after the last event seen; a compacted history is read again."""
        console_key, record_key = self.keys.console(host, self.uuid), self.keys.record(host,
                                                                                     self.uuid)
        inbox: queue.Queue[Any] = queue.Queue()
        # The last revision seen per key: one transaction can change both keys at one
        # revision (DELETED and the console gone), each delivered by its own watch.
        seen = {console_key: revision, record_key: revision}
        history_lost = threading.Event()

        def read_again() -> int:
            # etcd compacted what we had not seen: `run` looks the instance up and reads it
            # again, then follows from there with new watches.
            history_lost.set()
            inbox.put(None)
            raise Cancelled()

        watches = [PrefixWatch(self.store, key, on_event=inbox.put, resync=read_again,
                               start_revision=revision + 1, name="console watch",
                               max_delay=RETRY_SECONDS, log=_Notes(self.sink))
                   for key in (console_key, record_key)]
        for watch in watches:
            watch.start()
        try:
            while not self.stopping.is_set():
                try:
                    event = inbox.get(timeout=POLL_SECONDS)
                except queue.Empty:
                    continue
                if history_lost.is_set():
                    return AGAIN
                if event is None:
                    continue
                key = event.key.decode()
                if key not in seen or event.mod_revision <= seen[key]:
                    continue  # delivered again after a resubscription
                seen[key] = event.mod_revision
                deleted = isinstance(event, pyetcd.events.DeleteEvent)
                if key == console_key and not deleted:
                    self.show(self._decode(messages.CONSOLE, event.value))
                elif key == record_key:
                    if deleted:
                        return AGAIN  # moved to another host, or gone: look it up
                    status = self._finish(self._decode(messages.INSTANCE_RECORD,
                                                       event.value) or {"state": "?"})
                    if status is not None:
                        return status
            return 0
        finally:
            for watch in watches:
                watch.cancel()


class _Notes:
    """What a follow's watches have to say goes to its sink as notes (stderr), one line each,
    not to the log."""

    def __init__(self, sink: Sink):
        self.sink = sink

    def _note(self, message: str, *args: Any, **_kwargs: Any) -> None:
        self.sink.note("etcd " + (message % args if args else message))

    warning = info = exception = _note

    def debug(self, *_args: Any, **_kwargs: Any) -> None:
        pass

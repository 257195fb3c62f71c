"""schedule.py's side of the scheduler service: ask through the queue, wait for the answer.

`QueueClient.schedule(request_spec)` writes the request only if a service
takes requests now (one transaction compares /queue/open), then waits for
the answer on its own key through an etcd watch (from the revision of the
write, so an answer written meanwhile is not missed). It returns what the
direct path returns (destinations, or the same exceptions), or None when no
service is there: the caller then schedules by itself.

If the service goes away and none takes over within `fallback_after`
seconds, or nothing answers within `timeout`, the request is withdrawn (a
delete compared against it, so a request being answered is never withdrawn)
and the caller schedules by itself, or gets ServiceUnavailable. Ctrl-C
withdraws it too.
"""

from __future__ import annotations

import os
import queue as queuelib
import socket
import time
import uuid as uuidlib
from typing import Any

import pyetcd.events

from etcd_compute import messages
from etcd_compute.errors import InvalidMessage, ServiceUnavailable
from etcd_compute.etcd import Compare, Delete, Store, Txn, absent, put_message
from etcd_compute.scheduler.queue import request_message, result_of
from etcd_compute.scheduler.spec import Destination, RequestSpec

# How often the client looks whether a service still takes requests while it waits.
CHECK_SECONDS = 1.0


class Withdrawn(Exception):
    """The request was taken back: schedule it directly."""


class QueueClient:
    def __init__(self, store: Store, settings: dict[str, Any]):
        self.store = store
        self.keys = store.keys
        self.timeout = float(settings["wait_timeout_seconds"])
        # A standby takes over within a lease TTL (plus its next campaign, a sweep).
        self.fallback_after = 2.0 * settings["controller_lease_ttl"] + 5.0
        # What the answer said about 409s, for `--json`.
        self.conflicts = 0

    def schedule(self, request_spec: RequestSpec) -> list[Destination] | None:
        """Destinations from the service; None when no service takes requests (schedule
        directly). Raises what `Scheduler.select_destinations` raises."""
        request_uuid = str(uuidlib.uuid4())
        key = self.keys.queue_request(request_uuid)
        message = request_message(request_spec, f"{socket.gethostname()}:{os.getpid()}")
        revision = self.store.commit(Txn(
            [Compare(self.keys.queue_open(), "version", ">", 0), absent(key)],
            [put_message(messages.SCHEDULE_REQUEST, key, message)]))
        if revision is None:
            return None
        try:
            answer = self._wait(request_uuid, revision)
        except Withdrawn:
            return None
        except KeyboardInterrupt:
            if self._withdraw(request_uuid):
                raise
            answer = self._wait(request_uuid, revision, patience=10.0)
        self.conflicts = answer.get("conflicts", 0)
        return result_of(answer)

    def _withdraw(self, request_uuid: str) -> bool:
        """Take the request back; False if it is gone already (answered, or being so)."""
        key = self.keys.queue_request(request_uuid)
        try:
            return self.store.commit(Txn([Compare(key, "version", ">", 0)],
                                         [Delete(key)])) is not None
        except ServiceUnavailable:
            return False

    def _wait(self, request_uuid: str, revision: int,
              patience: float | None = None) -> dict[str, Any]:
        """The answer, as soon as etcd has it; Withdrawn or ServiceUnavailable otherwise."""
        key = self.keys.queue_answer(request_uuid)
        started = time.monotonic()
        closed_since: float | None = None
        events: queuelib.Queue[Any] = queuelib.Queue()
        watch_id = self._watch(key, revision, events)
        try:
            while True:
                try:
                    item = events.get(timeout=CHECK_SECONDS)
                except queuelib.Empty:
                    item = None
                if isinstance(item, Exception):  # the watch broke: etcd restarted, say
                    time.sleep(CHECK_SECONDS)
                    watch_id = self._watch(key, revision, events)
                    item = None
                for event in getattr(item, "events", []):
                    if isinstance(event, pyetcd.events.PutEvent):
                        return self._collect(key, event)
                waited = time.monotonic() - started
                if patience is not None and waited > patience:
                    raise ServiceUnavailable("the scheduler service did not answer")
                if self.store.get(self.keys.queue_open()) is None:
                    closed_since = closed_since or time.monotonic()
                else:
                    closed_since = None
                gone = closed_since is not None and \
                    time.monotonic() - closed_since > self.fallback_after
                if (gone or waited > self.timeout) and self._withdraw(request_uuid):
                    if gone:
                        raise Withdrawn()
                    raise ServiceUnavailable(
                        f"the scheduler service did not answer within {self.timeout:g} s "
                        "(request withdrawn; see `schedule.py serve`'s log)")
        finally:
            self._cancel(watch_id)

    def _watch(self, key: str, revision: int, events: queuelib.Queue[Any]) -> Any:
        with self.store.errors():
            return self.store.client.add_watch_callback(key, events.put,
                                                        start_revision=revision + 1)

    def _cancel(self, watch_id: Any) -> None:
        try:
            self.store.client.cancel_watch(watch_id)
        except Exception:  # noqa: BLE001 (closing anyway)
            pass

    def _collect(self, key: str, event: Any) -> dict[str, Any]:
        """Decode the answer, then remove it (it is ours; it would expire anyway)."""
        try:
            answer = messages.decode(messages.SCHEDULE_ANSWER, event.value)
        except InvalidMessage as exc:
            raise ServiceUnavailable(f"the scheduler service's answer is unreadable: "
                                     f"{exc}") from None
        try:
            self.store.commit(Txn([Compare(key, "mod", "==", event.mod_revision)],
                                  [Delete(key)]))
        except ServiceUnavailable:
            pass  # it expires with its lease
        return answer

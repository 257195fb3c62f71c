"""schedule.py's side of the scheduler service: ask through the queue, wait for the answer,
and never leave a request behind.

`QueueClient.schedule(request_spec)` reads /queue/open first (etcd unreachable:
nothing is written, ServiceUnavailable at once), writes the request with its
deadline (now + `wait_timeout_seconds`) only if a service takes requests now
(one transaction compares /queue/open), then waits for the answer on its own
key (`watching.PrefixWatch` from the revision of the write: an answer written
meanwhile is not missed, a compacted history is read again, an etcd that
cannot be reached is waited out). It returns what the direct path returns
(destinations, or the same exceptions), or None when no service is there: the
caller then schedules by itself.

Giving up leaves nothing behind. If the service goes away and none takes over
within `fallback_after` seconds, the deadline passes, or Ctrl-C, the request
is withdrawn (a delete compared against it: a request being answered is never
withdrawn; one answered meanwhile has its answer taken instead). If etcd
cannot be reached to withdraw it (or a write's outcome is unknown), the client
keeps trying until the deadline and the clock skew allowed have passed: the
service never places a request past its deadline, so an exit 3 means nothing
was placed. An answer that cannot be read has its instances taken back
(`take_back.py`) before the error.
"""

from __future__ import annotations

import logging
import os
import queue as queuelib
import socket
import uuid as uuidlib
from collections.abc import Callable
from typing import Any

import pyetcd.events

from etcd_compute import messages
from etcd_compute.clock import SYSTEM, Clock
from etcd_compute.errors import InvalidMessage, ServiceUnavailable
from etcd_compute.etcd import Compare, Delete, Store, Txn, absent, put_message
from etcd_compute.ops.take_back import take_back
from etcd_compute.placement import PlacementClient
from etcd_compute.scheduler.queue import (
    CLOCK_SKEW_SECONDS,
    instance_uuids,
    request_message,
    result_of,
)
from etcd_compute.scheduler.spec import Destination, RequestSpec
from etcd_compute.watching import PrefixWatch

LOG = logging.getLogger("etcd_compute.schedule")

# How often the client looks whether a service still takes requests while it waits, and
# tries again to withdraw a request while etcd cannot be reached.
CHECK_SECONDS = 1.0


class Withdrawn(Exception):
    """The request was taken back: schedule it directly."""


class QueueClient:
    def __init__(self, store: Store, settings: dict[str, Any],
                 placement: Callable[[], PlacementClient] | None = None,
                 clock: Clock = SYSTEM):
        self.store = store
        self.keys = store.keys
        self.settings = settings
        self.timeout = float(settings["wait_timeout_seconds"])
        # A standby takes over within a lease TTL (plus its next campaign, a sweep).
        self.fallback_after = 2.0 * settings["controller_lease_ttl"] + 5.0
        # Placement, only to take back an answer we cannot stand by (made when needed).
        self.placement = placement
        # What the answer said about 409s, for `--json`.
        self.conflicts = 0
        # The deadline is wall time (the service compares it with its own clock).
        self.clock = clock

    def schedule(self, request_spec: RequestSpec) -> list[Destination] | None:
        """Destinations from the service; None when no service takes requests (schedule
        directly). Raises what `Scheduler.select_destinations` raises."""
        if self.store.get(self.keys.queue_open()) is None:
            return None  # (etcd unreachable: raised, and nothing was written)
        request_uuid = str(uuidlib.uuid4())
        key = self.keys.queue_request(request_uuid)
        deadline = self.clock.wall() + self.timeout
        message = request_message(request_spec, f"{socket.gethostname()}:{os.getpid()}",
                                  deadline)
        try:
            revision = self.store.commit(Txn(
                [Compare(self.keys.queue_open(), "version", ">", 0), absent(key)],
                [put_message(messages.SCHEDULE_REQUEST, key, message)]))
        except ServiceUnavailable as exc:
            # Written or not, we cannot tell: make sure it is not (or take its answer).
            answer = self._settle(request_uuid, request_spec.count, deadline, exc)
        else:
            if revision is None:
                return None
            try:
                answer = self._ask(request_uuid, request_spec.count, revision, deadline)
            except Withdrawn:
                return None
        self.conflicts = answer.get("conflicts", 0)
        return result_of(answer)

    def _ask(self, request_uuid: str, count: int, revision: int,
             deadline: float) -> dict[str, Any]:
        """The answer to our request; Withdrawn (the service went away: it was taken back)
        or ServiceUnavailable (it was not placed) otherwise."""
        try:
            answer = self._wait(request_uuid, count, revision, deadline)
        except KeyboardInterrupt:
            if self._withdraw(request_uuid) is True:
                raise
            # Answered meanwhile (take it), or etcd cannot be reached (make sure).
            answer = self._settle(request_uuid, count, deadline, None)
        if answer is None:  # the deadline passed
            answer = self._settle(request_uuid, count, deadline, None, timed_out=True)
        return answer

    # --- waiting ----------------------------------------------------------------------

    def _wait(self, request_uuid: str, count: int, revision: int,
              deadline: float) -> dict[str, Any] | None:
        """The answer as soon as etcd has it; None once the deadline passed; Withdrawn if the
        service went away and the request could be taken back."""
        key = self.keys.queue_answer(request_uuid)
        inbox: queuelib.Queue[Any] = queuelib.Queue()

        def read_again() -> int:  # the watch lost history: what the answer key holds now
            entries, at = self.store.get_prefix(key)
            for entry in entries:
                if entry.key == key:
                    inbox.put((entry.value, entry.mod_revision))
            return at

        def arrived(event: Any) -> None:
            if isinstance(event, pyetcd.events.PutEvent) and event.key.decode() == key:
                inbox.put((event.value, event.mod_revision))

        watch = PrefixWatch(self.store, key, on_event=arrived, resync=read_again,
                            start_revision=revision + 1, name="answer watch", log=_Quiet())
        watch.start()
        closed_since: float | None = None
        try:
            while True:
                try:
                    value, mod_revision = self.clock.get(inbox, CHECK_SECONDS)
                except queuelib.Empty:
                    pass
                else:
                    return self._collect(request_uuid, count, value, mod_revision)
                if self.clock.wall() > deadline:
                    return None
                try:
                    is_open = self.store.get(self.keys.queue_open()) is not None
                except ServiceUnavailable:
                    continue  # etcd cannot be reached now: the answer may come yet
                closed_since = None if is_open else (closed_since or self.clock.now())
                if closed_since is not None and \
                        self.clock.now() - closed_since > self.fallback_after and \
                        self._withdraw(request_uuid) is True:
                    raise Withdrawn()
        finally:
            watch.cancel()

    # --- giving up --------------------------------------------------------------------

    def _withdraw(self, request_uuid: str) -> bool | None:
        """Take the request back: True if we did, False if it is gone (answered, or never
        written), None if etcd cannot be reached."""
        key = self.keys.queue_request(request_uuid)
        try:
            return self.store.commit(Txn([Compare(key, "version", ">", 0)],
                                         [Delete(key)])) is not None
        except ServiceUnavailable:
            return None

    def _settle(self, request_uuid: str, count: int, deadline: float,
                cause: ServiceUnavailable | None, timed_out: bool = False) -> dict[str, Any]:
        """Make sure the request will never be placed, or take its answer: withdraw it, or
        find the answer it got. Until etcd answers, or the deadline and the clock skew
        allowed have passed (the service places nothing past the deadline)."""
        while True:
            outcome = self._withdraw(request_uuid)
            if outcome is True:
                if timed_out:
                    raise ServiceUnavailable(
                        f"the scheduler service did not answer within {self.timeout:g} s "
                        "(request withdrawn; see `schedule.py serve`'s log)")
                raise cause or ServiceUnavailable("request withdrawn: nothing was placed")
            if outcome is False:
                answer = self._answer_now(request_uuid, count)
                if answer is not None:
                    return answer
                # Gone without an answer: never written, or removed unanswered.
                raise cause or ServiceUnavailable(
                    "the scheduler service removed the request unanswered: nothing was "
                    "placed")
            if self.clock.wall() > deadline + CLOCK_SKEW_SECONDS:
                raise ServiceUnavailable(
                    f"etcd cannot be reached to withdraw the request; it expired at its "
                    f"deadline, after which the scheduler service places nothing: nothing "
                    f"was placed ({cause or 'etcd unreachable'})")
            self.clock.sleep(CHECK_SECONDS)

    def _answer_now(self, request_uuid: str, count: int) -> dict[str, Any] | None:
        entry = self.store.get(self.keys.queue_answer(request_uuid))
        if entry is None:
            return None
        return self._collect(request_uuid, count, entry.value, entry.mod_revision)

    def _collect(self, request_uuid: str, count: int, value: bytes,
                 mod_revision: int) -> dict[str, Any]:
        """Decode the answer, then remove it (it is ours; it would expire anyway). One that
        cannot be read is not stood by: what it placed is taken back first."""
        key = self.keys.queue_answer(request_uuid)
        try:
            answer = messages.decode(messages.SCHEDULE_ANSWER, value)
        except InvalidMessage as exc:
            left = self._take_back(instance_uuids(request_uuid, count))
            raise ServiceUnavailable(
                f"the scheduler service's answer is unreadable: {exc}; "
                + ("its instances were taken back" if not left else
                   f"could not take back {', '.join(left)}")) from None
        try:
            self.store.commit(Txn([Compare(key, "mod", "==", mod_revision)], [Delete(key)]))
        except ServiceUnavailable:
            pass  # it expires with its lease
        return answer

    def _take_back(self, uuids: list[str]) -> list[str]:
        """Take back whatever exists of these instances; the uuids that could not be."""
        if self.placement is None:
            return uuids
        try:
            done = take_back(self.store, self.placement(), uuids,
                             self.settings["etcd_max_txn_ops"])
        except ServiceUnavailable as exc:
            LOG.warning("could not take back %s: %s", ", ".join(uuids), exc)
            return uuids
        return done.left


class _Quiet:
    """What the answer's watch has to say, at DEBUG only: schedule.py's errors are one line
    on stderr (and its wait for an answer goes on through etcd's trouble)."""

    def _debug(self, message: str, *args: Any, **_kwargs: Any) -> None:
        LOG.debug(message, *args)

    warning = info = exception = debug = _debug

"""Consoles: the tail of each new guest's serial log, republished on etcd while it boots.

Published when an instance becomes ACTIVE, then every few seconds while it
changes during its first minutes, so `schedule.py console UUID` shows the
boot from any machine without asking the host. The guest's diagnostics (the
compute API's `/servers/{id}/diagnostics`) go with it, republished at most
every DIAGNOSTICS_REFRESH_SECONDS while the console is followed: figures as of
the message's `updated_at`. All are read in one worker job per tick; only the
main process writes them to etcd.
"""

from __future__ import annotations

import concurrent.futures
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from etcd_compute import messages
from etcd_compute.compute import worker
from etcd_compute.compute.pool import WorkerPool
from etcd_compute.etcd import KeyValueStore
from etcd_compute.instances import records, states

CONSOLE_MAX_BYTES = 65536
CONSOLE_REFRESH_SECONDS = 5
# How long after ACTIVE a console keeps being republished.
CONSOLE_FOLLOW_SECONDS = 600
# How often unchanged console text is written again for its diagnostics' sake.
DIAGNOSTICS_REFRESH_SECONDS = 30


@dataclass
class ConsoleFollow:
    """A console being republished while the guest boots."""

    host: str
    since: float = field(default_factory=lambda: time.monotonic())
    digest: int | None = None
    written: float = 0.0  # monotonic time of the last write


class Consoles:
    def __init__(self, store: KeyValueStore, pool: WorkerPool,
                 post: Callable[[Callable[..., None], tuple[Any, ...]], None]):
        self.store = store
        self.pool = pool
        self.post = post
        # Recently ACTIVE instances here -> ConsoleFollow.
        self.followed: dict[str, ConsoleFollow] = {}

    def follow(self, host: str, uuid: str) -> None:
        """Publish this instance's console now and while it boots."""
        self.followed[uuid] = ConsoleFollow(host)
        self.publish([uuid])

    def forget(self, uuid: str) -> None:
        self.followed.pop(uuid, None)

    def refresh(self) -> None:
        """Republish the consoles still followed (boot output), in one worker job."""
        now = time.monotonic()
        for uuid, follow in list(self.followed.items()):
            if now - follow.since > CONSOLE_FOLLOW_SECONDS:
                del self.followed[uuid]
        if self.followed:
            self.publish(sorted(self.followed))

    def publish(self, uuids: list[str]) -> None:
        if self.pool.stopped:
            return  # fenced: consoles wait until the guests run again
        future = self.pool.schedule(worker.consoles, uuids, CONSOLE_MAX_BYTES, timeout=60)
        future.add_done_callback(lambda f: self.post(self.store_tails, (f,)))

    def store_tails(self, future: concurrent.futures.Future) -> None:
        """Write the tails a console job read (main process), those that changed."""
        if future.cancelled() or future.exception() is not None:
            return
        now = time.monotonic()
        for uuid, seen in future.result().items():
            text, diagnostics = seen["text"], seen.get("diagnostics")
            follow = self.followed.get(uuid)
            if follow is None or (follow.digest == hash(text) and (
                    diagnostics is None or now - follow.written < DIAGNOSTICS_REFRESH_SECONDS)):
                continue
            if records.read_record(self.store, follow.host, uuid).state != states.ACTIVE:
                self.forget(uuid)
                continue
            message = {"uuid": uuid, "text": text, "updated_at": time.time(),
                       "truncated": len(text.encode()) >= CONSOLE_MAX_BYTES}
            if diagnostics is not None:
                message["diagnostics"] = diagnostics
            self.store.put(messages.CONSOLE, self.store.keys.console(follow.host, uuid),
                           message)
            follow.digest, follow.written = hash(text), now

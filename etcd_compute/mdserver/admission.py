"""Per-source admission: no guest holds more than its share of the metadata server.

Waitress bounds connections for the whole server (`connection_limit`) and stops
accepting at that bound; before this, one guest that opened that many connections
and sent nothing stalled every other guest's metadata until its connections idled
out (issue 18). Here every accepted connection is counted against its source
address, and one from a source that already holds `connections_per_guest` is
closed at once, before it becomes a waitress channel: it never takes a shared slot,
and other guests are served while one holds its cap. (Sources are guests' addresses:
the guest filter stops spoofing, and caps the same count in the kernel first.)

`SourceCounts` is the accounting (plain, thread-safe, unit-tested);
`PerSourceAdmission` installs it in a waitress server: waitress's accept calls its
`channel_class` with each accepted socket, and a counted channel gives its slot back
when waitress removes it from the server's map, however it is closed.
"""

from __future__ import annotations

import logging
import socket
import threading
import time
from collections.abc import Callable
from typing import Any

from waitress.channel import HTTPChannel

log = logging.getLogger("etcd_compute.mdserver")

# A source that keeps knocking at its cap is logged once, then at most this often, and what
# was not logged yet when it holds no connection any more.
REFUSAL_LOG_SECONDS = 10.0


class SourceCounts:
    """Open connections per source address, each source capped at `per_source`."""

    def __init__(self, per_source: int, clock: Callable[[], float] = time.monotonic):
        if per_source < 1:
            raise ValueError(f"per_source must be at least 1, not {per_source}")
        self.per_source = per_source
        self._clock = clock
        self._lock = threading.Lock()
        self._open: dict[str, int] = {}
        # source -> (when its refusals were last logged, refusals since, refusals in all)
        self._refusals: dict[str, tuple[float, int, int]] = {}

    def held(self, source: str) -> int:
        with self._lock:
            return self._open.get(source, 0)

    def admits(self, source: str) -> bool:
        """Whether `source` may open one more connection (a refusal is logged, sparingly).
        Asked and followed by `opened` on the one thread that accepts connections."""
        with self._lock:
            if self._open.get(source, 0) < self.per_source:
                return True
            self._note_refusal(source)
            return False

    def opened(self, source: str) -> None:
        with self._lock:
            self._open[source] = self._open.get(source, 0) + 1

    def closed(self, source: str) -> None:
        """One connection of `source` is gone (from any thread)."""
        with self._lock:
            held = self._open.get(source, 0) - 1
            if held > 0:
                self._open[source] = held
            else:  # only sources holding connections are remembered
                self._open.pop(source, None)
                self._last_refusals(source)

    def sources(self) -> dict[str, int]:
        with self._lock:
            return dict(self._open)

    def _note_refusal(self, source: str) -> None:
        now = self._clock()
        logged, since, total = self._refusals.get(source, (None, 0, 0))
        since, total = since + 1, total + 1
        if logged is None or now - logged >= REFUSAL_LOG_SECONDS:
            log.warning("%s holds %d connections, its cap (connections_per_guest): "
                        "closed %d more at once", source, self.per_source, since)
            self._refusals[source] = (now, 0, total)
        else:
            self._refusals[source] = (logged, since, total)

    def _last_refusals(self, source: str) -> None:
        """The source let go of its last connection: its refusals not logged yet are, before
        it is forgotten (every refusal is counted in exactly one warning)."""
        _logged, since, total = self._refusals.pop(source, (None, 0, 0))
        if since:
            log.warning("%s holds no connection now: closed %d more at once since the last "
                        "warning, %d in all while at its cap (connections_per_guest)",
                        source, since, total)


class _CountedChannel(HTTPChannel):
    """A waitress channel counted against its source while it is in the server's map
    (every way a channel closes ends in `del_channel`; waitress may call it twice)."""

    def __init__(self, counts: SourceCounts, source: str, *args: Any, **kwargs: Any):
        self._counts = counts
        self._source = source
        self._counted = False
        super().__init__(*args, **kwargs)

    def add_channel(self, map: dict[int, Any] | None = None) -> None:  # noqa: A002 (waitress's)
        super().add_channel(map)
        if not self._counted:
            self._counted = True
            self._counts.opened(self._source)

    def del_channel(self, map: dict[int, Any] | None = None) -> None:  # noqa: A002
        super().del_channel(map)
        if self._counted:
            self._counted = False
            self._counts.closed(self._source)


class PerSourceAdmission:
    """A waitress server's channel factory: a channel for each accepted connection whose
    source is under its cap; any other is closed at once."""

    def __init__(self, counts: SourceCounts):
        self.counts = counts

    def install(self, server: Any) -> None:
        server.channel_class = self

    def __call__(self, server: Any, sock: socket.socket, addr: Any, adj: Any,
                 map: dict[int, Any] | None = None) -> HTTPChannel | None:  # noqa: A002
        source = addr[0] if isinstance(addr, tuple) and addr else str(addr)
        if not self.counts.admits(source):
            sock.close()
            return None
        try:
            return _CountedChannel(self.counts, source, server, sock, addr, adj, map=map)
        except OSError as exc:
            # The peer went away before the channel was made (waitress would take the
            # listening socket down with this error): forget this connection alone.
            log.info("%s: connection lost as it was accepted: %s", source, exc)
            sock.close()
            return None

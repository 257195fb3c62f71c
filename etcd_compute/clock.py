"""Time as the daemons' loops see it: one seam, so that unit tests move time instead of
waiting for it.

A loop that renews a lease, retries after a failure, ticks or gives up at a deadline
takes a `Clock` (`SYSTEM` unless a test gives another) and asks it, never `time` or a
bare `Event.wait`: `now()` for intervals and deadlines (monotonic), `wall()` for
timestamps others read, `sleep`, `wait(event, seconds)`, `get(queue, seconds)` and
`later(seconds, function)`. The unit tests' clock (`tests/unit/fake_clock.py`) holds
time still until the test moves it, and then wakes each thread whose time has come.
"""

from __future__ import annotations

import queue
import threading
import time
from collections.abc import Callable
from typing import Any, TypeVar

Item = TypeVar("Item")


class Clock:
    """Real time."""

    def now(self) -> float:
        """Monotonic seconds: for intervals and deadlines, never written anywhere."""
        return time.monotonic()

    def wall(self) -> float:
        """Seconds since the epoch: for timestamps written to etcd or shown."""
        return time.time()

    def sleep(self, seconds: float) -> None:
        time.sleep(seconds)

    def wait(self, event: threading.Event, seconds: float | None) -> bool:
        """Until `event` is set (True) or `seconds` passed (False)."""
        return event.wait(seconds)

    def get(self, items: queue.Queue[Item], seconds: float | None) -> Item:
        """The next item of `items`, waiting up to `seconds` (`queue.Empty` after)."""
        return items.get(timeout=seconds)

    def later(self, seconds: float, function: Callable[..., Any], *args: Any) -> None:
        """Call `function(*args)` once, in a thread of its own, after `seconds`."""
        timer = threading.Timer(seconds, function, args)
        timer.daemon = True
        timer.start()


SYSTEM = Clock()

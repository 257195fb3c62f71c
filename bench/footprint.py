"""Memory of the compute daemon, sampled in the background while variants run."""

from __future__ import annotations

import threading

from bench.services import ComputeProcess


class RssSampler:
    """Peak RSS of a compute daemon (main process, and with its workers) every `interval`."""

    def __init__(self, compute: ComputeProcess, interval: float = 0.5):
        self.compute = compute
        self.interval = interval
        self.peak = {"main_mb": 0.0, "with_workers_mb": 0.0}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="rss", daemon=True)

    def _loop(self) -> None:
        while not self._stop.wait(self.interval):
            try:
                now = self.compute.rss_mb()
            except Exception:
                continue
            for key, value in now.items():
                self.peak[key] = max(self.peak[key], value)

    def __enter__(self) -> RssSampler:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(timeout=5)

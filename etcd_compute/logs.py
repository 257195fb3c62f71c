"""Logging: one line per event, the instance uuid in every instance line."""

from __future__ import annotations

import logging
import sys


class _InstanceField(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        if not hasattr(record, "instance"):
            record.instance = "-"
        return True


def setup(level: str, stream=sys.stderr) -> None:
    handler = logging.StreamHandler(stream)
    handler.addFilter(_InstanceField())
    handler.setFormatter(logging.Formatter(
        "%(asctime)s %(levelname)s %(name)s [instance %(instance)s] %(message)s"
    ))
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level)
    # Libraries' chatter is not ours to report at INFO.
    for noisy in ("urllib3", "pebble"):
        logging.getLogger(noisy).setLevel(max(logging.WARNING, root.level))

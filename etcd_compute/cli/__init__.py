"""Command-line entry points (`compute.py`/`ecompute`, `schedule.py`/`eschedule`)."""

from __future__ import annotations

import argparse
from typing import NoReturn

from etcd_compute.errors import UsageError


class Parser(argparse.ArgumentParser):
    """argparse whose errors are one line (UsageError), not usage text plus exit."""

    def error(self, message: str) -> NoReturn:
        raise UsageError(message)

"""Command-line entry points (`compute.py`/`ecompute`, `schedule.py`/`eschedule`).

Text that came from elsewhere (a guest's console, a record, an argument echoed
in an error) reaches the operator's terminal only through `terminal_text` or
`terminal_line`: terminal control sequences (ESC, the other C0 and C1 controls,
DEL) are shown escaped, never interpreted.
"""

from __future__ import annotations

import argparse
import re
from typing import NoReturn

from etcd_compute.errors import UsageError

# C0 controls but tab and newline, DEL, C1 controls.
_CONTROLS = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]")
_CONTROLS_AND_NEWLINES = re.compile(r"[\x00-\x1f\x7f-\x9f]")


def _escaped(match: re.Match[str]) -> str:
    return f"\\x{ord(match.group()):02x}"


def terminal_text(text: str) -> str:
    """`text` safe to print: control characters escaped, newlines and tabs kept."""
    return _CONTROLS.sub(_escaped, text)


def terminal_line(text: str) -> str:
    """`text` safe to print on one line: newlines and tabs escaped as well."""
    return _CONTROLS_AND_NEWLINES.sub(_escaped, text)


class Parser(argparse.ArgumentParser):
    """argparse whose errors are one line (UsageError), not usage text plus exit."""

    def error(self, message: str) -> NoReturn:
        raise UsageError(terminal_line(message))

"""What `schedule.py` prints: JSON, tables, key/value rows, progress lines, errors.

Text from elsewhere (records, events, a guest's console, names the operator gave)
reaches the terminal only through `terminal_line`/`terminal_text` (cli/__init__.py).
"""

from __future__ import annotations

import json
import sys
import time
from typing import Any

from etcd_compute.cli import terminal_line
from etcd_compute.errors import NoValidHost

PROG = "schedule.py"


def emit_json(data: Any) -> None:
    print(json.dumps(data, indent=2, sort_keys=True))


def table(rows: list[list[str]], header: list[str]) -> None:
    """Columns as wide as their widest cell, two spaces apart."""
    rows = [[terminal_line(str(cell)) for cell in row] for row in rows]
    widths = [max(len(str(x)) for x in column) for column in zip(header, *rows, strict=False)]
    for row in [header, *rows]:
        print("  ".join(cell.ljust(width) for cell, width in zip(row, widths,
                                                                  strict=False)).rstrip())


def rows(pairs: list[tuple[str, str]]) -> None:
    """`key  value` lines, the keys padded to the longest."""
    width = max((len(key) for key, _ in pairs), default=0)
    for key, value in pairs:
        print(terminal_line(f"{key:<{width}}  {value}"))


def resources_text(resources: dict[str, int] | None) -> str:
    return ",".join(f"{rc}:{n}" for rc, n in sorted((resources or {}).items())) or "-"


def when(timestamp: float | None) -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(timestamp)) if timestamp else "-"


def progress(uuid: str, record: dict[str, Any] | None) -> None:
    """One line per state an instance reaches while --wait follows it."""
    if record is None:
        print(f"{uuid} GONE", flush=True)
        return
    detail = {"ACTIVE": f"ip={record.get('ip') or '-'}",
              "ERROR": f"error={record.get('error') or '-'}"}.get(record["state"], "")
    where = record.get("host_name") or record.get("host") or "-"
    print(terminal_line(f"{uuid} {record['state']} on {where} {detail}".rstrip()), flush=True)


def quiet(*_args: Any) -> None:
    """--json: nothing on the way, everything at the end."""


def progress_of(as_json: bool) -> Any:
    return quiet if as_json else progress


def no_valid_host(as_json: bool, exc: NoValidHost) -> int:
    """NO ALLOCATIONS LEFT, then one reason a line (exit status 1)."""
    if as_json:
        emit_json({"error": str(exc), "reasons": exc.reasons})
    else:
        print(str(exc))
        for reason in exc.reasons:
            print(terminal_line(reason))
    return 1


def error(line: str) -> None:
    """`schedule.py: error: ...` on stderr, one line."""
    print(f"{PROG}: error: {terminal_line(line)}", file=sys.stderr)


def note(line: str) -> None:
    """`schedule.py: ...` on stderr, one line, at once."""
    print(f"{PROG}: {terminal_line(line)}", file=sys.stderr, flush=True)

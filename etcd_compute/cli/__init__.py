"""Command-line entry points (`compute.py`/`ecompute`, `schedule.py`/`eschedule`, `cluster.py`).

Text that came from elsewhere (a guest's console, a record, an argument echoed
in an error) reaches the operator's terminal only through `terminal_text` or
`terminal_line`: terminal control sequences (ESC, the other C0 and C1 controls,
DEL) are shown escaped, never interpreted. A serial console ends its lines with
CRLF: that CR is part of the line end, not a control to show.

`Parser` is argparse whose errors are one line (exit status 2); `Commands` builds
schedule.py's commands, each a subparser with its own help and only its options.
"""

from __future__ import annotations

import argparse
import re
from collections.abc import Callable
from typing import Any, NoReturn

from etcd_compute.errors import UsageError

# C0 controls but tab and newline, DEL, C1 controls.
_CONTROLS = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]")
_CONTROLS_AND_NEWLINES = re.compile(r"[\x00-\x1f\x7f-\x9f]")


def _escaped(match: re.Match[str]) -> str:
    return f"\\x{ord(match.group()):02x}"


def terminal_text(text: str) -> str:
    """`text` safe to print: control characters escaped, newlines and tabs kept, a CRLF
    shown as the line end it is."""
    return _CONTROLS.sub(_escaped, text.replace("\r\n", "\n"))


def terminal_line(text: str) -> str:
    """`text` safe to print on one line: newlines and tabs escaped as well."""
    return _CONTROLS_AND_NEWLINES.sub(_escaped, text)


class Parser(argparse.ArgumentParser):
    """argparse whose errors are one line (UsageError), not usage text plus exit."""

    def error(self, message: str) -> NoReturn:
        raise UsageError(terminal_line(message))


Handler = Callable[[argparse.Namespace, dict[str, Any]], int]


class CommandParser(Parser):
    """One command's parser. `words` says what the command takes (e.g. "expected exactly
    one instance uuid"): argparse's complaints about missing words, or a word that is no
    subcommand of it, become "COMMAND: WORDS"."""

    words: str | None = None
    path = ""

    def error(self, message: str) -> NoReturn:
        missing = message.partition("the following arguments are required: ")[2]
        words_missing = missing and not any(name.startswith("-")
                                            for name in missing.split(", "))
        if self.words and (words_missing or "invalid choice" in message):
            raise UsageError(f"{self.path}: {self.words}")
        super().error(message)


class Commands:
    """The commands of a program (or under one command), each a `CommandParser` taking
    the `common` options (allowed before the command word too) and, unless told otherwise,
    --json. `every` maps each command's path ("stop", "host drain") to its parser."""

    def __init__(self, subparsers: Any, common: argparse.ArgumentParser,
                 every: dict[str, CommandParser], under: str = ""):
        self.subparsers, self.common, self.every, self.under = subparsers, common, every, under

    def add(self, name: str, summary: str, words: str | None = None,
            handler: Handler | None = None, json: bool = True,
            description: str | None = None) -> CommandParser:
        """A command `name` ("schedule.py NAME --help" shows `description` or `summary`)."""
        parser = self.subparsers.add_parser(
            name, help=summary, description=description or summary, parents=[self.common],
            formatter_class=argparse.RawDescriptionHelpFormatter)
        parser.path = f"{self.under} {name}".strip()
        parser.words = words
        if json:
            parser.add_argument("--json", action="store_true", help="machine-readable output")
        if handler is not None:
            parser.set_defaults(handler=handler)
        self.every[parser.path] = parser
        return parser

    def group(self, name: str, summary: str, words: str,
              description: str | None = None) -> Commands:
        """A command whose first word is one of the commands added to what this returns
        (`host disable HOST`, `zone list`)."""
        parser = self.add(name, summary, words, json=False, description=description)
        subparsers = parser.add_subparsers(dest="action", metavar="ACTION", required=True,
                                           parser_class=CommandParser,
                                           prog=parser.prog)
        return Commands(subparsers, self.common, self.every, parser.path)


# --- what commands open (imported when they run: `--help` needs neither grpc nor requests)


def store_of(config: dict[str, Any]) -> Any:
    """An etcd Store, used as `with store_of(config) as store:` (closed afterwards)."""
    from etcd_compute.etcd import Store

    return Store(config["etcd"])


def placement_of(config: dict[str, Any]) -> Any:
    """A Placement client."""
    from etcd_compute.placement import PlacementClient

    return PlacementClient(config["placement"])

"""schedule.py console UUID [--follow | --url]: the guest's serial console, as its host
publishes it; or the URL of its screen (noVNC through the console proxy).

A guest writes its console: what it prints must not drive our terminal. Its text is
shown through `terminal_text` (controls escaped, a CRLF line end kept as a line end);
--follow prints what the guest writes as it is republished, until Ctrl-C or the
instance is gone (`ops/console_follow.py`).
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from etcd_compute.cli import Commands, output, terminal_line, terminal_text
from etcd_compute.cli import zones as zones_cli
from etcd_compute.errors import UsageError


def add_commands(commands: Commands) -> None:
    console = commands.add("console", "the guest's serial console (the tail its host "
                                      "published)", "expected exactly one instance uuid",
                           cmd_console)
    console.add_argument("uuid", metavar="UUID")
    shown = console.add_mutually_exclusive_group()
    shown.add_argument("--follow", "-f", action="store_true",
                       help="keep printing what the guest writes, until Ctrl-C or the "
                            "instance is gone")
    shown.add_argument("--url", action="store_true",
                       help="print the URL of the guest's screen in a browser (noVNC through "
                            "the console proxy; a single-use token, valid "
                            "console.token_ttl_seconds)")


def cmd_console(args: argparse.Namespace, config: dict[str, Any]) -> int:
    from etcd_compute.ops import operations

    uuid = operations.check_uuid(args.uuid)
    if args.url:
        return _url(args, config, uuid)
    if args.follow:
        return _follow(args, config, uuid)
    with zones_cli.instance_zone(config, uuid) as zone:
        text = operations.console(zone.store, uuid)
    if args.json:
        output.emit_json({"uuid": uuid, "text": text})
    else:
        text = terminal_text(text)
        sys.stdout.write(text if text.endswith("\n") or not text else text + "\n")
    return 0


def _url(args: argparse.Namespace, config: dict[str, Any], uuid: str) -> int:
    """`console UUID --url`: the guest's noVNC URL, as the compute API gives its users."""
    from etcd_compute.ops import operations

    with zones_cli.instance_zone(config, uuid) as zone:
        try:
            url = operations.remote_console(zone.store, uuid, config["console"])
        except operations.NoRemoteConsole as exc:
            raise UsageError(str(exc)) from None
    if args.json:
        output.emit_json({"uuid": uuid, "type": "novnc", "url": url})
    else:
        print(url)
    return 0


class TerminalSink:
    """A console follow for a terminal: the guest's text escaped (it must not drive our
    terminal), our own lines on lines of their own, notes on stderr. A CR that ends one
    update waits for the next: with the LF it is a line end, alone it is shown."""

    def __init__(self) -> None:
        self.at_line_start = True
        self.held_cr = False

    def _write(self, text: str) -> None:
        if not text:
            return
        sys.stdout.write(text)
        sys.stdout.flush()
        self.at_line_start = text.endswith("\n")

    def _release_cr(self) -> None:
        if self.held_cr:
            self.held_cr = False
            self._write(terminal_text("\r"))

    def _line(self, line: str) -> None:
        self._release_cr()
        self._write(("" if self.at_line_start else "\n") + terminal_line(line) + "\n")

    def text(self, text: str) -> None:
        if self.held_cr:
            self.held_cr = False
            text = "\r" + text
        if text.endswith("\r"):
            self.held_cr, text = True, text[:-1]
        self._write(terminal_text(text))

    def restarted(self) -> None:
        from etcd_compute.ops.console_follow import RESTARTED

        self._line(RESTARTED)

    def ended(self, status: int, line: str) -> None:
        self._line(line)

    def note(self, line: str) -> None:
        output.note(line)


class JsonSink:
    """A console follow as JSON lines: {"uuid", "text", "restarted"} per update, then
    {"uuid", "end", "status"}; notes on stderr."""

    def __init__(self, uuid: str):
        self.uuid, self.restart = uuid, False

    def _emit(self, data: dict[str, Any]) -> None:
        print(json.dumps({"uuid": self.uuid, **data}, sort_keys=True), flush=True)

    def text(self, text: str) -> None:
        self._emit({"text": text, "restarted": self.restart})
        self.restart = False

    def restarted(self) -> None:
        self.restart = True

    def ended(self, status: int, line: str) -> None:
        self._emit({"end": line, "status": status})

    def note(self, line: str) -> None:
        output.note(line)


def _follow(args: argparse.Namespace, config: dict[str, Any], uuid: str) -> int:
    """`console UUID --follow`: until Ctrl-C/SIGTERM (0) or the instance is gone."""
    import signal
    import threading

    from etcd_compute.ops.console_follow import ConsoleFollower

    stopping = threading.Event()
    previous = {number: signal.signal(number, lambda *_: stopping.set())
                for number in (signal.SIGINT, signal.SIGTERM)}
    try:
        with zones_cli.instance_zone(config, uuid) as zone:
            sink = JsonSink(uuid) if args.json else TerminalSink()
            return ConsoleFollower(zone.store, uuid, sink, stopping).run()
    finally:
        for number, handler in previous.items():
            signal.signal(number, handler)

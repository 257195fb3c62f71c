"""cli/__init__.py: text from elsewhere reaches the terminal with its control characters shown,
never interpreted (a CRLF line end is a line end); argparse's errors are one line
(UsageError), not usage text and an exit; commands parse their own options."""

from __future__ import annotations

import pytest

from etcd_compute.cli import CommandParser, Commands, Parser, terminal_line, terminal_text
from etcd_compute.errors import UsageError

# An escape sequence (clear screen, set title), BEL, backspace, DEL and a C1 CSI.
HOSTILE = "a\x1b[2J\x1b]0;owned\x07b\x08c\x7fd\x9b31m"
SHOWN = "a\\x1b[2J\\x1b]0;owned\\x07b\\x08c\\x7fd\\x9b31m"


def test_terminal_text_escapes_controls_and_keeps_newlines_and_tabs():
    assert terminal_text(HOSTILE + "\nnext\tcolumn\r") == SHOWN + "\nnext\tcolumn\\x0d"


def test_a_crlf_is_a_line_end_and_a_lone_cr_is_shown():
    """A serial console ends its lines with CRLF: `console` once showed \\x0d at each end."""
    assert terminal_text("login:\r\nsecond\r\n") == "login:\nsecond\n"
    assert terminal_text("progress 10%\rprogress 20%\r\n") == "progress 10%\\x0dprogress 20%\n"
    assert terminal_text("\r\r\n") == "\\x0d\n"  # only the CR of the line end is dropped
    assert terminal_line("a\r\nb") == "a\\x0d\\x0ab"  # one line: every control shown


def test_commands_each_parse_their_own_options_and_words():
    common = Parser(add_help=False)
    common.add_argument("--config")
    parser = Parser(prog="p")
    every: dict = {}
    commands = Commands(parser.add_subparsers(dest="command", parser_class=CommandParser),
                        common, every)
    stop = commands.add("stop", "stop it", "expected exactly one instance uuid",
                        handler=lambda *_: 0)
    stop.add_argument("uuid")
    group = commands.group("host", "hosts", "expected host show HOST")
    group.add("show", "show it", "expected one HOST", json=False).add_argument("host")
    assert sorted(every) == ["host", "host show", "stop"]
    args = parser.parse_args(["stop", "u", "--json", "--config", "c"])
    assert (args.command, args.uuid, args.json, args.config) == ("stop", "u", True, "c")
    assert parser.parse_args(["host", "show", "h"]).host == "h"
    for argv, fault in [(["stop"], "stop: expected exactly one instance uuid"),
                        (["host"], "host: expected host show HOST"),
                        (["host", "frob", "h"], "host: expected host show HOST"),
                        (["host", "show"], "host show: expected one HOST"),
                        (["host", "show", "h", "--json"], "unrecognized arguments: --json")]:
        with pytest.raises(UsageError, match=fault):
            parser.parse_args(argv)


def test_a_missing_option_is_not_taken_for_missing_words():
    parser = CommandParser(prog="p zone add")
    parser.path, parser.words = "zone add", "expected a NAME"
    parser.add_argument("name")
    parser.add_argument("--etcd", required=True)
    with pytest.raises(UsageError, match="required: --etcd"):
        parser.parse_args(["x"])
    with pytest.raises(UsageError, match="zone add: expected a NAME"):
        parser.parse_args(["--etcd", "h:1"])


def test_terminal_line_escapes_newlines_and_tabs_too():
    assert terminal_line(HOSTILE + "\nnext\tcolumn") == SHOWN + "\\x0anext\\x09column"


@pytest.mark.parametrize("escape", [terminal_text, terminal_line])
def test_printable_text_is_left_as_it_is(escape):
    text = "état: ACTIVE — 10.0.0.9 ✓ \\x1b"  # a written-out escape is not one
    assert escape(text) == text


def test_every_c0_and_c1_control_and_del_is_escaped():
    controls = [chr(c) for c in [*range(0x20), 0x7F, *range(0x80, 0xA0)]]
    escaped = terminal_line("".join(controls))
    assert escaped == "".join(f"\\x{ord(c):02x}" for c in controls)
    assert all(c.isprintable() for c in escaped)


def test_a_parser_error_is_one_usage_error_line_with_controls_escaped():
    parser = Parser(prog="schedule.py")
    parser.add_argument("command", choices=["list"])
    with pytest.raises(UsageError) as raised:  # argparse echoes these as they came
        parser.parse_args(["list", "x\x1b[2J\ny"])
    message = str(raised.value)
    assert message == "unrecognized arguments: x\\x1b[2J\\x0ay"
    assert "\n" not in message and "\x1b" not in message
    assert raised.value.exit_code == 2

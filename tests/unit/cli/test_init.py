"""cli/__init__.py: text from elsewhere reaches the terminal with its control characters shown,
never interpreted; argparse's errors are one line (UsageError), not usage text and an exit."""

from __future__ import annotations

import pytest

from etcd_compute.cli import Parser, terminal_line, terminal_text
from etcd_compute.errors import UsageError

# An escape sequence (clear screen, set title), BEL, backspace, DEL and a C1 CSI.
HOSTILE = "a\x1b[2J\x1b]0;owned\x07b\x08c\x7fd\x9b31m"
SHOWN = "a\\x1b[2J\\x1b]0;owned\\x07b\\x08c\\x7fd\\x9b31m"


def test_terminal_text_escapes_controls_and_keeps_newlines_and_tabs():
    assert terminal_text(HOSTILE + "\nnext\tcolumn\r") == SHOWN + "\nnext\tcolumn\\x0d"


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

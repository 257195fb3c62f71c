"""Running the CLIs in-process and checking their one-line errors (the `config` fixture of
schedule.py's tests is in conftest.py)."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from etcd_compute.cli import schedule as schedule_cli

UUID = "0b7e4f1e-9a0c-4a51-8f0e-5d2c3b4a6e7f"
# An escape sequence (set title, clear screen), BEL, a C1 CSI, NUL, backspace.
HOSTILE = "\x1b]0;owned\x07\x1b[2J\x9b31m\x00\x08"


def run(main: Callable[[list[str]], int], capsys: pytest.CaptureFixture[str],
        *argv: str) -> tuple[int, str, str]:
    """(exit status, stdout, stderr) of `main(argv)`."""
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def assert_usage_error(program: str, result: tuple[int, str, str], *fragments: str) -> None:
    """Exit status 2, nothing on stdout, one line on stderr naming each fragment."""
    code, out, err = result
    assert code == 2, err
    assert out == ""
    assert err.startswith(f"{program}: error: ") and err.endswith("\n")
    assert len(err.splitlines()) == 1 and "Traceback" not in err
    for fragment in fragments:
        assert fragment in err


def schedule(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    """(exit status, stdout, stderr) of `schedule.py ARGV`, in-process."""
    return run(schedule_cli.main, capsys, *argv)


def schedule_usage_error(result: tuple[int, str, str], *fragments: str) -> None:
    assert_usage_error("schedule.py", result, *fragments)

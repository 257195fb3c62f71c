"""Running the CLIs in-process and checking their one-line errors."""

from __future__ import annotations

from collections.abc import Callable

import pytest


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

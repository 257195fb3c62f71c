"""Small helpers shared by all tests (fixtures live in conftest.py)."""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from typing import Any

import pytest

IN_CI = os.environ.get("CI", "").lower() == "true"


def unavailable(what: str) -> None:
    """Fail in CI, skip on a developer machine without the service."""
    if IN_CI:
        pytest.fail(f"{what} (CI=true: missing services fail the run)", pytrace=False)
    pytest.skip(what)


def wait_for(predicate: Callable[[], Any], timeout: float = 20.0, interval: float = 0.05,
             what: str = "condition") -> Any:
    """Poll `predicate` until it returns something truthy; fail the test on timeout."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(interval)
    raise AssertionError(f"timed out after {timeout} s waiting for {what}")

"""The unit layer's own fixtures (tests/conftest.py's services are not used here)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.unit import fake_clock


@pytest.fixture(autouse=True)
def _fake_clocks_closed_after_each_test() -> Iterator[None]:
    """A thread a test left waiting on its fake clock stops polling it at once."""
    yield
    fake_clock.close_all()

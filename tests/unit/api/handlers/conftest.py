"""The handlers' usual world: one live host and the m1.tiny flavor. A module that needs
another world defines its own `harness` fixture (or extends this one by asking for it)."""

from __future__ import annotations

import pytest

from tests.unit.api.harness import Harness


@pytest.fixture
def harness() -> Harness:
    harness = Harness.new()
    harness.add_host()
    harness.add_flavor()
    return harness

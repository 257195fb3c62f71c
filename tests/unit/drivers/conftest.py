"""The migration tests' shared fixtures (tests/unit/drivers/migration_world.py)."""

from tests.unit.drivers.migration_world import config, driver, image, moving  # noqa: F401

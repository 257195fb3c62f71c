"""The settings' defaults hold to their own schemas (config.py merges files over them)."""

from __future__ import annotations

from etcd_compute import defaults
from etcd_compute.config import validate


def test_the_compute_defaults_are_a_valid_compute_yaml() -> None:
    validate(defaults.COMPUTE_DEFAULTS, "compute_config", "defaults")


def test_the_schedule_defaults_are_a_valid_schedule_yaml() -> None:
    validate(defaults.SCHEDULE_DEFAULTS, "schedule_config", "defaults")


def test_hosts_and_the_scheduler_start_with_the_same_network() -> None:
    # One backend for the whole cloud unless a site says otherwise on both sides.
    assert defaults.COMPUTE_DEFAULTS["network"] == defaults.SCHEDULE_DEFAULTS["network"]

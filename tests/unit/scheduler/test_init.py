"""scheduler/__init__.py: the library's names, imported from their modules on first use."""

from __future__ import annotations

import subprocess
import sys

import pytest

import etcd_compute.scheduler as scheduler_lib
from etcd_compute.scheduler import request, scheduler, spec
from tests.support import REPO


def test_each_name_is_the_one_of_its_module():
    assert scheduler_lib.Scheduler is scheduler.Scheduler
    assert scheduler_lib.select_destinations is scheduler.select_destinations
    assert scheduler_lib.update_resource_stats is scheduler.update_resource_stats
    assert scheduler_lib.RequestSpec is spec.RequestSpec
    assert scheduler_lib.Destination is spec.Destination
    assert scheduler_lib.parse_query is request.parse_query
    assert sorted(scheduler_lib.__all__) == sorted(scheduler_lib._HOMES)


def test_an_unknown_name_is_an_attribute_error():
    with pytest.raises(AttributeError, match="has no attribute 'plan'"):
        _ = scheduler_lib.plan


def test_the_package_alone_imports_neither_the_planner_nor_placement():
    """What schedule.py's queue path relies on: `RequestSpec` without the rest."""
    code = ("import sys, etcd_compute.scheduler as s; s.RequestSpec; "
            "print(sorted(m for m in sys.modules if m in ('etcd_compute.placement', "
            "'etcd_compute.scheduler.planner', 'etcd_compute.scheduler.scheduler')))")
    done = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True,
                          text=True, timeout=30, check=True)
    assert done.stdout.strip() == "[]"

"""preload.py: the forkserver loads what every worker runs, once, and freezes it."""

from __future__ import annotations

import subprocess
import sys

from etcd_compute.compute.pool import PRELOAD
from tests.support import REPO

LOAD = f"""
import gc, sys
import {PRELOAD}
print('pebble.pool.process' in sys.modules, 'etcd_compute.compute.worker' in sys.modules,
      gc.get_freeze_count() > 1000, gc.isenabled())
"""


def test_the_pool_names_the_preload_and_it_loads_the_workers_code_frozen():
    said = subprocess.run([sys.executable, "-c", LOAD], cwd=REPO, capture_output=True,
                          text=True, timeout=60, check=True).stdout.split()
    assert said == ["True", "True", "True", "True"]  # and the collector on again

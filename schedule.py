#!/usr/bin/env python3
"""Scheduler entry point; see etcd_compute/cli/schedule.py.

Runs as written (`./schedule.py ...`) after `make install`: under the project's .venv when
the python3 on PATH lacks our dependencies (etcd_compute/launch.py).
"""

import sys

from etcd_compute.launch import main

if __name__ == "__main__":
    sys.exit(main("etcd_compute.cli.schedule", __file__, sys.argv[1:]))

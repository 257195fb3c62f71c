#!/usr/bin/env python3
"""Scheduler entry point; see etcd_compute/cli/schedule.py."""

import sys

from etcd_compute.cli.schedule import main

if __name__ == "__main__":
    sys.exit(main())

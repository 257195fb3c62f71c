#!/usr/bin/env python3
"""Compute daemon entry point; see etcd_compute/cli/compute.py."""

import sys

from etcd_compute.cli.compute import main

if __name__ == "__main__":
    sys.exit(main())

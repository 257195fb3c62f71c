#!/usr/bin/env python3
"""Cluster administration entry point (certificates, etcd users and roles); see
etcd_compute/cli/cluster.py."""

import sys

from etcd_compute.cli.cluster import main

if __name__ == "__main__":
    sys.exit(main())

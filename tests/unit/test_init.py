"""etcd_compute/__init__.py: before any module of ours imports grpc, gRPC's C core is told to
keep quiet (its lines would surround our one-line errors), unless the operator said
otherwise; and grpc.aio, which nothing of ours uses, is imported only when used."""

from __future__ import annotations

import os
import subprocess
import sys

from tests.support import REPO

SHOW = "import etcd_compute, os, sys; print(os.environ['GRPC_VERBOSITY'], 'grpc' in sys.modules)"


def verbosity(**environ: str) -> str:
    env = {k: v for k, v in os.environ.items() if k != "GRPC_VERBOSITY"} | environ
    return subprocess.run([sys.executable, "-c", SHOW], cwd=REPO, env=env, capture_output=True,
                          text=True, timeout=60, check=True).stdout.strip()


def test_grpc_is_quiet_before_it_is_imported():
    assert verbosity() == "NONE False"


def test_the_operators_setting_wins():
    assert verbosity(GRPC_VERBOSITY="DEBUG") == "DEBUG False"


AIO = """
import sys
import etcd_compute.etcd
print('grpc' in sys.modules, 'grpc.aio._channel' in sys.modules)
import grpc
print(grpc.aio.Metadata.__module__, 'grpc.aio._channel' in sys.modules)
import grpc.aio
from grpc.aio import insecure_channel
print(type(sys.modules['grpc.aio']).__name__, insecure_channel.__module__)
"""


def test_grpc_aio_is_imported_only_when_something_uses_it():
    lines = subprocess.run([sys.executable, "-c", AIO], cwd=REPO, capture_output=True,
                           text=True, timeout=60, check=True).stdout.split("\n")
    assert lines[:3] == ["True False", "grpc.aio._metadata True",
                         "module grpc.aio._channel"]

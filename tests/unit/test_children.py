"""children.py: one of our modules run as a child process from any working directory."""

from __future__ import annotations

import subprocess
import sys

from etcd_compute.children import PACKAGE_ROOT, module_command
from tests.support import REPO


def test_the_package_s_directory_is_the_checkout():
    assert PACKAGE_ROOT == str(REPO)


def test_a_module_runs_as_main_with_its_arguments_from_elsewhere(tmp_path):
    argv = module_command("etcd_compute.virt.remote_fence", "--address", "127.0.0.1",
                          "--pki-dir", str(tmp_path / "no-pki"), "--name", "hv1")
    assert argv[0] == sys.executable
    done = subprocess.run(argv, cwd=tmp_path, capture_output=True, text=True, timeout=60,
                          check=False)
    assert done.returncode == 2, done.stderr  # it ran, and answered: no certificates there
    assert '"outcome": "failed"' in done.stdout and "our libvirt certificates" in done.stdout
    bad = subprocess.run([*argv, "not-a-uuid"], cwd=tmp_path, capture_output=True, text=True,
                         timeout=60, check=False)
    assert bad.returncode == 2 and "not-a-uuid" in bad.stdout + bad.stderr

"""Tempest judges the compute API: its smoke-tagged `tempest.api.compute` tests pass.

`make tempest SMOKE=1` as a test: tools/tempest_run starts a cloud of its own (what `make
up` starts, on free ports in a temporary directory: etcd, Placement, Keystone, Glance,
the API, Neutron on OVN, a controller and fake-driver computes each on an OVN chassis, plugging
their servers' ports), writes the tempest.conf that says what
we have, runs Tempest (from `.venv-tempest`, which `make test` installs) and stops it all.
Every smoke test must pass or be skipped by Tempest for a feature we truly lack; the
whole set (`make tempest`) is docs/how-to/contributors/tempest.md's report.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support import REPO, unavailable

TEMPEST = Path(os.environ.get("TEMPEST_VENV", REPO / ".venv-tempest")) / "bin" / "tempest"
# Smoke tests a cloud with Neutron and without a volume service runs (the others are
# skipped by Tempest for what we lack): each must be among the passed. The server's
# addresses are its Neutron port's, which its fake host plugged; the security groups
# are Neutron's through the compute API's proxy.
MUST_PASS = ("test_server_addresses.ServerAddressesTestJSON.test_list_server_addresses",
             "test_security_groups.SecurityGroupsTestJSON."
             "test_security_groups_create_list_delete",
             "test_versions.TestVersions.test_list_api_versions",
             "test_versions.TestVersions.test_get_version_details",
             "test_flavors.FlavorsV2TestJSON.test_list_flavors",
             "test_create_server.ServersTestJSON.test_verify_server_details",
             "test_create_server.ServersTestJSON.test_list_servers",
             "test_server_actions.ServerActionsTestJSON.test_reboot_server_hard")


# Its own cloud starts in about 40 s and the smoke set runs in about a minute here; on a
# machine loaded by the rest of make test both take up to three times as long.
@pytest.mark.timeout(540)
def test_tempest_smoke_tests_of_the_compute_api_pass(tmp_path: Path):
    if not TEMPEST.exists():
        unavailable(f"Tempest is not installed in {TEMPEST.parent.parent} "
                    "(tools/install.sh tempest)")
    report = tmp_path / "tempest-smoke-report.txt"
    runner = subprocess.Popen(
        [sys.executable, "-m", "tools.tempest_run", "--smoke", "--concurrency", "2",
         "--run-dir", str(tmp_path / "tempest"), "--report", str(report)],
        cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        output, _ = runner.communicate(timeout=480)
    finally:
        if runner.poll() is None:  # timed out: the runner stops its cloud on SIGTERM
            runner.terminate()
            runner.communicate(timeout=60)
    run = subprocess.CompletedProcess(runner.args, runner.returncode, output)
    assert report.exists(), output[-3000:]
    text = report.read_text()
    counts = re.search(r"^(\d+) passed, (\d+) failed, (\d+) skipped$", text, re.MULTILINE)
    assert counts, text[-3000:]
    passed, failed = int(counts[1]), int(counts[2])
    assert failed == 0, text
    assert run.returncode == 0, output[-3000:]  # also 1 when none passed
    ran = set(re.findall(r"tempest\.api\.compute\.\S+", _passed(tmp_path)))
    missing = [test for test in MUST_PASS if not any(test in name for name in ran)]
    assert not missing, f"not passed: {missing}\n{text}"
    assert passed >= len(MUST_PASS)
    # Everything it started is gone (stopped by pid, its directory removed).
    assert not (tmp_path / "tempest" / "cloud" / "services.json").exists()


def _passed(tmp_path: Path) -> str:
    """The passed tests' ids, from the summary the runner leaves in its workspace."""
    import json

    summary = json.loads((tmp_path / "tempest" / "workspace" / "summary.json").read_text())
    return "\n".join(summary.get("passed", []))

"""A Tempest run as make test's tests make it: `python -m tools.tempest_run` with its own
cloud in a temporary directory, and what it reported (tests/api/test_tempest_smoke.py,
tests/network/test_tempest_scenario_smoke_vm.py)."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from tests.support import REPO, unavailable

TEMPEST = Path(os.environ.get("TEMPEST_VENV", REPO / ".venv-tempest")) / "bin" / "tempest"


@dataclass(frozen=True)
class TempestRun:
    report: str  # the report's text (tools/tempest_run/report.py)
    output: str  # the runner's own output
    returncode: int
    passed: int
    failed: int
    skipped: int
    passed_ids: frozenset[str]

    def missing(self, must_pass: tuple[str, ...]) -> list[str]:
        """The tests of `must_pass` (parts of test ids) that are not among the passed."""
        return [test for test in must_pass
                if not any(test in name for name in self.passed_ids)]


def run_tempest(tmp_path: Path, *args: str, timeout: float) -> TempestRun:
    """Run the runner with `args` in `tmp_path`; stopped (SIGTERM: it stops its cloud) if it
    outlasts `timeout` seconds. Asserts a report was written and that nothing it started
    is left (its services file removed)."""
    if not TEMPEST.exists():
        unavailable(f"Tempest is not installed in {TEMPEST.parent.parent} "
                    "(tools/install.sh tempest)")
    report = tmp_path / "tempest-report.txt"
    run_dir = tmp_path / "tempest"
    runner = subprocess.Popen(
        [sys.executable, "-m", "tools.tempest_run", *args, "--run-dir", str(run_dir),
         "--report", str(report)],
        cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        output, _ = runner.communicate(timeout=timeout)
    finally:
        if runner.poll() is None:  # timed out: the runner stops its cloud on SIGTERM
            runner.terminate()
            runner.communicate(timeout=120)
    assert report.exists(), output[-3000:]
    text = report.read_text()
    counts = re.search(r"^(\d+) passed, (\d+) failed, (\d+) skipped$", text, re.MULTILINE)
    assert counts, text[-3000:]
    summary = json.loads((run_dir / "workspace" / "summary.json").read_text())
    # Everything it started is gone (stopped by pid, its directory removed).
    assert not (run_dir / "cloud" / "services.json").exists()
    return TempestRun(report=text, output=output, returncode=runner.returncode,
                      passed=int(counts[1]), failed=int(counts[2]), skipped=int(counts[3]),
                      passed_ids=frozenset(summary.get("passed", [])))

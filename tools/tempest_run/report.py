"""Tempest's subunit stream as our report: passed, skipped with Tempest's reason, failed.

    .venv-tempest/bin/python -m tools.tempest_run.report STREAM REPORT [--json SUMMARY]

Run by Tempest's virtualenv (python-subunit and testtools are Tempest's): it imports
nothing of etcd-compute. A class whose setup was skipped is one entry
(`setUpClass (tempest.api.compute....)`), as stestr counts it. The report lists the
skips grouped by reason (most frequent first), the passed, then every failure with the
end of its traceback; the last line is the plain count ("N passed, N failed, N skipped").
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from collections import defaultdict
from pathlib import Path
from typing import Any

PASSED, FAILED, SKIPPED = "passed", "failed", "skipped"
# subunit statuses: success, fail, skip, xfail (expected failure), uxsuccess, exists...
_OUTCOME = {"success": PASSED, "xfail": PASSED, "fail": FAILED, "uxsuccess": FAILED,
            "skip": SKIPPED}
# A test's id without its attributes: ...test_x[id-...,smoke] -> ...test_x
_ATTRS = re.compile(r"\[[^\]]*\]\Z")


def read_stream(path: Path) -> list[dict[str, Any]]:
    """One dict per test that ended: id, outcome, reason (a skip's), traceback (a fail's)."""
    import subunit
    import testtools

    results: list[dict[str, Any]] = []

    def ended(test: dict[str, Any]) -> None:
        outcome = _OUTCOME.get(test["status"])
        if outcome is None:  # "exists" (a listing), "inprogress" (a worker died mid-test)
            if test["status"] != "inprogress":
                return
            outcome = FAILED
        details = test.get("details", {})
        results.append({"id": test["id"], "outcome": outcome,
                        "reason": _text(details.get("reason")),
                        "traceback": _text(details.get("traceback"))})

    with open(path, "rb") as stream:
        case = subunit.ByteStreamToStreamResult(stream, non_subunit_name="stdout")
        result = testtools.StreamToDict(ended)
        result.startTestRun()
        try:
            case.run(result)
        finally:
            result.stopTestRun()
    return results


def _text(content: Any) -> str:
    if content is None:
        return ""
    return b"".join(bytes(chunk) for chunk in content.iter_bytes()).decode(
        "utf-8", "replace").strip()


def summarize(results: list[dict[str, Any]]) -> dict[str, Any]:
    """Counts, skips grouped by reason, failures with their tracebacks' last lines."""
    counts = {PASSED: 0, FAILED: 0, SKIPPED: 0}
    skips: dict[str, list[str]] = defaultdict(list)
    failures, passed = [], []
    for test in sorted(results, key=lambda t: t["id"]):
        counts[test["outcome"]] += 1
        if test["outcome"] == PASSED:
            passed.append(_ATTRS.sub("", test["id"]))
        elif test["outcome"] == SKIPPED:
            skips[test["reason"] or "(no reason given)"].append(_ATTRS.sub("", test["id"]))
        elif test["outcome"] == FAILED:
            failures.append({"id": test["id"],
                             "traceback": test["traceback"].splitlines()[-12:]})
    grouped = sorted(skips.items(), key=lambda item: (-len(item[1]), item[0]))
    return {"counts": counts,
            "skips": [{"reason": reason, "count": len(ids), "tests": ids}
                      for reason, ids in grouped],
            "failures": failures, "passed": passed}


def render(summary: dict[str, Any]) -> str:
    counts = summary["counts"]
    lines = [f"Tempest: {counts[PASSED]} passed, {counts[SKIPPED]} "
             f"skipped, {counts[FAILED]} failed", "", "Skipped, by Tempest's reason:"]
    for skip in summary["skips"]:
        lines.append(f"  {skip['count']:4d}  {skip['reason']}")
        lines.extend(f"          {test}" for test in skip["tests"])
    lines += ["", f"Passed ({counts[PASSED]}):"]
    lines.extend(f"  {test}" for test in summary["passed"])
    lines += ["", f"Failed ({counts[FAILED]}):"]
    for failure in summary["failures"]:
        lines.append(f"  {failure['id']}")
        lines.extend(f"      {line}" for line in failure["traceback"])
    lines += ["", f"{counts[PASSED]} passed, {counts[FAILED]} failed, "
                  f"{counts[SKIPPED]} skipped"]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("stream", type=Path, help="Tempest's subunit v2 stream")
    parser.add_argument("report", type=Path, help="where the report is written")
    parser.add_argument("--json", type=Path, help="the summary as JSON, here")
    args = parser.parse_args(argv)
    summary = summarize(read_stream(args.stream))
    args.report.write_text(render(summary))
    if args.json:
        args.json.write_text(json.dumps(summary, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())

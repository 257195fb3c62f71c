#!/usr/bin/env python3
"""What bounds the scheduler service: its passes, phase by phase, from a `schedule.py serve` log.

    .venv/bin/python bench/run.py --keep-logs ...      # keeps <run dir>/<backend>/serve.log
    .venv/bin/python bench/passes.py <run dir>/postgresql/serve.log

Each pass logs how many requests it took and how long its phases took: read (the
queue), hosts (the hosts' accounts, or asking Placement for candidates: 0 when a kept
answer was reused), plan, claim (one `POST /allocations`), write (the etcd
transactions), other, and how long the service waited before it. One serve.log holds
every variant run with the service, each after its own "leader now" line (a new
`schedule.py serve`); this prints, per variant in order, the passes, the mean batch,
the p50 of each phase and each phase's share of the passes' time. The output is kept
in bench/results/profiles/service-passes-*.txt.
"""

from __future__ import annotations

import re
import statistics
import sys
from dataclasses import dataclass

PASS = re.compile(r"pass of (\d+) request\(s\).*?(\d+) ms \(read (\d+), hosts (\d+) \[\d+ on "
                  r"accounts, \d+ on candidates\], plan (\d+), claim (\d+), write (\d+), "
                  r"other (\d+)\) after (\d+) ms waiting")
PHASES = ("read", "hosts", "plan", "claim", "write", "other", "waiting")


@dataclass
class Pass:
    requests: int
    total: int
    phases: dict[str, int]


def runs(lines: list[str]) -> list[list[Pass]]:
    """The passes of each `schedule.py serve`, in order (a leader change starts a run)."""
    found: list[list[Pass]] = []
    for line in lines:
        if "leader now" in line or not found:
            found.append([])
        match = PASS.search(line)
        if match:
            requests, total, *phases = (int(x) for x in match.groups())
            found[-1].append(Pass(requests, total, dict(zip(PHASES, phases, strict=True))))
    return [passes for passes in found if passes]


def summary(passes: list[Pass]) -> str:
    total = sum(p.total + p.phases["waiting"] for p in passes) or 1
    parts = [f"{len(passes)} passes, {sum(p.requests for p in passes)} requests, mean batch "
             f"{statistics.mean(p.requests for p in passes):.1f}, pass p50 "
             f"{statistics.median(p.total for p in passes):.0f} ms"]
    for phase in PHASES:
        values = [p.phases[phase] for p in passes]
        parts.append(f"{phase} p50 {statistics.median(values):.0f} ms "
                     f"({100 * sum(values) / total:.0f}%)")
    return "; ".join(parts)


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print(__doc__.strip().splitlines()[0], file=sys.stderr)
        print("usage: bench/passes.py SERVE_LOG", file=sys.stderr)
        return 2
    with open(argv[0]) as log:
        found = runs(log.readlines())
    for index, passes in enumerate(found, 1):
        print(f"serve {index}: {summary(passes)}")
    return 0 if found else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

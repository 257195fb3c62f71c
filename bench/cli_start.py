"""What starting `schedule.py` costs: `schedule.py UUID` (an unknown instance: start, config,
one etcd read, exit 1) run alone, a fresh process each time, and where its imports' time
goes (`python -X importtime`, summed by top-level package).

Run against each suite's stack, so the TLS suite shows what its handshake adds (etcd over
TLS with a client certificate; `schedule.py UUID` never asks Placement).
"""

from __future__ import annotations

import subprocess
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

from bench import cpu, stats
from bench.clients import NOBODY, REPO, cli_environment

RUNS = 7


def importtime(argv: list[str], env: dict[str, str]) -> dict[str, float]:
    """Milliseconds of import per top-level package (self times summed), heaviest first."""
    done = subprocess.run([sys.executable, "-X", "importtime", *argv], capture_output=True,
                          text=True, cwd=REPO, env=env, check=False)
    spent: Counter[str] = Counter()
    for line in done.stderr.splitlines():
        if not line.startswith("import time:"):
            continue
        fields = line.removeprefix("import time:").split("|")
        if len(fields) != 3 or not fields[0].strip().isdigit():
            continue
        spent[fields[2].strip().split(".")[0]] += int(fields[0]) / 1000
    return dict(spent.most_common())


def measure(config_path: Path, runs: int = RUNS) -> dict[str, Any]:
    env = cli_environment()
    argv = [str(REPO / "schedule.py"), "--config", str(config_path), NOBODY]
    walls, cpus = [], []
    for _ in range(runs):
        started, reaped = time.perf_counter(), cpu.reaped_seconds()
        done = subprocess.run([sys.executable, *argv], capture_output=True, text=True,
                              cwd=REPO, env=env, check=False)
        walls.append(time.perf_counter() - started)
        cpus.append(cpu.reaped_seconds() - reaped)
        if done.returncode != 1 or "no instance" not in done.stderr:
            raise RuntimeError(f"schedule.py UUID: exit {done.returncode}: "
                               f"{done.stderr.strip()[:300]}")
    imports = importtime(argv, env)
    bare = [_bare_python(env) for _ in range(3)]
    return {"runs": runs, "wall_s": walls, "p50_ms": 1000 * (stats.percentile(walls, 50) or 0),
            "cpu_s": cpus, "cpu_p50_ms": 1000 * (stats.percentile(cpus, 50) or 0),
            "python_p50_ms": 1000 * (stats.percentile(bare, 50) or 0),
            "imports_ms": imports, "imports_total_ms": sum(imports.values())}


def _bare_python(env: dict[str, str]) -> float:
    """An interpreter that starts and exits (its site imports): the floor of any command."""
    started = time.perf_counter()
    subprocess.run([sys.executable, "-c", "pass"], env=env, check=False)
    return time.perf_counter() - started


def markdown_lines(suites: dict[str, Any]) -> list[str]:
    rows = []
    for backend, suite in suites.items():
        start = suite.get("cli_start")
        if not start:
            continue
        top = ", ".join(f"{name} {ms:.0f}" for name, ms in list(start["imports_ms"].items())[:8])
        cpu_ms = f"{start['cpu_p50_ms']:.0f}" if "cpu_p50_ms" in start else "-"
        rows.append(f"| {backend} | {start['p50_ms']:.0f} | {cpu_ms} | "
                    f"{start['python_p50_ms']:.0f} | {start['imports_total_ms']:.0f} | {top} |")
    if not rows:
        return []
    return ["", "## schedule.py's own start", "",
            f"`schedule.py UUID` of an unknown instance (start, config, one etcd read, exit 1) "
            f"alone, a fresh process each of {RUNS} times, its wall time and its CPU (user + "
            "system, the kernel's accounting; `python -m bench.start_cpu OLD NEW` compares "
            "every entry point's of two checkouts); a bare `python -c pass` beside it; "
            "its imports (`python -X importtime`, self times summed per top-level package, "
            "ms). With TLS the etcd connection adds a handshake with a client certificate; "
            "`schedule.py UUID` never asks Placement (its client, and `requests`, are made "
            "only by the commands that do).", "",
            "| stack | schedule.py UUID p50 ms | its CPU p50 ms | python -c pass p50 ms | "
            "imports ms | heaviest imports (ms) |", "|---|---|---|---|---|---|", *rows]

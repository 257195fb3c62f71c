#!/usr/bin/env python3
"""Benchmarks for etcd-compute (issue 6): `make bench` (quick) and `make bench-full`.

    .venv/bin/python bench/run.py --quick     # ~100 hosts / 100 instances, < 5 min
    .venv/bin/python bench/run.py             # the REPORT.md figures (1000 / 1000)

Starts its own etcd, PostgreSQL and Placement (and libvirt guests for the
boot benchmark), stops all of them by pid at the end, writes
bench/results/<mode>.json, the plots and bench/REPORT.md. Exits non-zero if a
correctness check fails (overcommit, a spec not delivered, an instance not
ACTIVE).
"""

from __future__ import annotations

import argparse
import json
import platform
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from bench import boot, recovery, report, suite  # noqa: E402
from bench.services import say  # noqa: E402
from bench.verify import CheckFailed  # noqa: E402

RESULTS = REPO / "bench" / "results"
MODES: dict[str, dict[str, Any]] = {
    "quick": {"hosts": 100, "instances": 100, "batch": 50, "processes": 8,
              "postgres_workers": 4, "boot_runs": 3, "cli_instances": 64,
              "recovery_rounds": 5, "rounds": 2},
    "full": {"hosts": 1000, "instances": 1000, "batch": 100, "processes": 8,
             "postgres_workers": 4, "boot_runs": 5, "cli_instances": 192,
             "recovery_rounds": 20, "rounds": 2},
}


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="small and short (make bench)")
    parser.add_argument("--hosts", type=int, help="simulated hosts (overrides the mode)")
    parser.add_argument("--instances", type=int, help="instances per variant")
    parser.add_argument("--batch", type=int, help="--count batch size for variant (c)")
    parser.add_argument("--cli-instances", type=int,
                        help="instances of the schedule.py process variants (f)")
    parser.add_argument("--backends", default="postgresql,sqlite,sqlite+tls",
                        help="Placement backends, comma-separated; +tls: the same with TLS and "
                             "RBAC, variants (b) and (c) only (default: "
                             "postgresql,sqlite,sqlite+tls)")
    parser.add_argument("--variants",
                        help="only these variants, e.g. a,c,f8s,g32 (default: all)")
    parser.add_argument("--boot-runs", type=int, help="boots of each kind (0 skips)")
    parser.add_argument("--rounds", type=int,
                        help="interleaved rounds: each variant runs its share of the instances "
                             "in every round, the variants in turn (default: the mode's)")
    parser.add_argument("--recovery-rounds", type=int,
                        help="host deaths timed for the recovery figures (0 skips)")
    parser.add_argument("--profile", action="store_true",
                        help="pyinstrument profiles of variants (b) and (c) in results/")
    parser.add_argument("--no-report", action="store_true", help="do not rewrite REPORT.md")
    parser.add_argument("--keep-logs", action="store_true",
                        help="keep the services' logs (the scheduler service's pass timings) "
                             "even when every check passed")
    parser.add_argument("--report-only", action="store_true",
                        help="regenerate the report and plots from results/<mode>.json")
    return parser.parse_args(argv)


def machine() -> dict[str, Any]:
    def out(*argv: str) -> str:
        try:
            return subprocess.run(argv, capture_output=True, text=True,
                                  check=False).stdout.strip()
        except OSError:
            return "(not installed)"

    cpu = next((line.split(":", 1)[1].strip() for line in
                Path("/proc/cpuinfo").read_text().splitlines()
                if line.startswith("model name")), "?")
    memory_kb = int(Path("/proc/meminfo").read_text().split()[1])
    return {
        "date": time.strftime("%Y-%m-%d %H:%M:%S %Z"),
        "cpu": cpu,
        "cores": len([1 for line in Path("/proc/cpuinfo").read_text().splitlines()
                      if line.startswith("processor")]),
        "memory_gib": round(memory_kb / 2**20, 1),
        "os": out("sh", "-c", ". /etc/os-release; echo $PRETTY_NAME"),
        "kernel": platform.release(),
        "python": platform.python_version(),
        "etcd": out("etcd", "--version").splitlines()[0] if shutil.which("etcd") else "?",
        "postgresql": out("/usr/lib/postgresql/15/bin/postgres", "--version"),
        "placement": out(str(REPO / ".venv-placement/bin/pip"), "show", "openstack-placement")
        .split("\n")[1:2],
        "libvirt": out("libvirtd", "--version"),
        "qemu": out("qemu-system-x86_64", "--version").splitlines()[0:1],
        "git_commit": out("git", "-C", str(REPO), "rev-parse", "--short", "HEAD"),
    }


def load() -> str:
    return Path("/proc/loadavg").read_text().strip()


def _exit_on_sigterm(signum: int, _frame: Any) -> None:
    raise SystemExit(128 + signum)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    mode = "quick" if args.quick else "full"
    settings = dict(MODES[mode])
    for key in ("hosts", "instances", "batch", "boot_runs", "cli_instances",
                "recovery_rounds", "rounds"):
        if getattr(args, key) is not None:
            settings[key] = getattr(args, key)
    if args.report_only:
        results = json.loads((RESULTS / f"{mode}.json").read_text())
        report.write(results, RESULTS, REPO / "bench" / "REPORT.md")
        for line in report.summary_lines(results):
            print(line)
        return 0
    only = set(args.variants.split(",")) if args.variants else None
    RESULTS.mkdir(parents=True, exist_ok=True)
    profile_dir = str(RESULTS / "profiles") if args.profile else None
    if profile_dir:
        Path(profile_dir).mkdir(exist_ok=True)
    results: dict[str, Any] = {"mode": mode, "settings": settings, "machine": machine(),
                               "load_before": load(), "suites": {}}
    say(f"bench {mode}: {settings}; load {results['load_before']}")
    started = time.monotonic()
    status = 0
    # SIGTERM (timeout, kill) must unwind through the `finally`s that stop services.
    signal.signal(signal.SIGTERM, _exit_on_sigterm)
    run_root = Path(tempfile.mkdtemp(prefix="etcd-compute-bench-"))
    try:
        for backend in filter(None, args.backends.split(",")):
            # What TLS costs is read on one-per-call and --count throughput, same run.
            only_here = only or ({"b", "c"} if backend.endswith("+tls") else None)
            results["suites"][backend] = suite.run_suite(
                backend, run_root / backend.replace("+", "-"), settings["hosts"],
                settings["instances"], settings["batch"], settings["processes"],
                settings["postgres_workers"], only_here, profile_dir,
                settings["cli_instances"], settings["rounds"])
            results["suites"][backend]["load_after"] = load()
        results["boot"] = boot.run_boot(run_root / "boot", settings["boot_runs"])
        results["recovery"] = recovery.run_recovery(run_root / "recovery",
                                                    settings["recovery_rounds"])
    except CheckFailed as exc:
        print(f"bench: CORRECTNESS CHECK FAILED: {exc}", file=sys.stderr, flush=True)
        results["failed"] = str(exc)
        status = 1
    except Exception as exc:
        print(f"bench: error: {type(exc).__name__}: {exc}", file=sys.stderr, flush=True)
        results["failed"] = f"{type(exc).__name__}: {exc}"
        status = 2
    finally:
        results["load_after"] = load()
        results["duration_seconds"] = time.monotonic() - started
        path = RESULTS / f"{mode}.json"
        path.write_text(json.dumps(results, indent=1))
        say(f"results: {path} ({results['duration_seconds']:.0f} s)")
        if status == 0 and not args.keep_logs:
            shutil.rmtree(run_root, ignore_errors=True)
        else:
            say(f"logs kept in {run_root}")
    if status == 0 and not args.no_report:
        report.write(results, RESULTS, REPO / "bench" / "REPORT.md")
    if status == 0:
        for line in report.summary_lines(results):
            print(line)
    return status


if __name__ == "__main__":
    sys.exit(main())

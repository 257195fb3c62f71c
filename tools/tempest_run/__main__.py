"""python -m tools.tempest_run [--smoke] [--scenario] [--concurrency N] [--keep] [--regex RE]

Start the cloud (cloud.py), write tempest.conf (conf.py) in a fresh `tempest init`
workspace, run Tempest's tests (all of `tempest.api.compute` and the smoke tests of
`tempest.api.network`, or the compute API's smoke tests), write the report (report.py) and
stop everything. Exits 0 only if no test failed and some passed.

With --scenario: Tempest's scenario tests (SCENARIO below; with --smoke, SCENARIO_SMOKE)
against a cloud of real TCG guests on two hypervisor hosts (scenario.py), Tempest run in
the outside namespace, where the floating IPs of the external network `public` are
reached.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

from etcd_compute.errors import EtcdComputeError
from tools.local_services.process import REPO
from tools.tempest_run import cloud
from tools.tempest_run.conf import tempest_conf

DEFAULT_RUN_DIR = REPO / "run" / "tempest"
TEMPEST_VENV = Path(os.environ.get("TEMPEST_VENV", REPO / ".venv-tempest"))
# Every compute API test, and the network API's smoke tests (Neutron's own API is not the
# subject, but the cloud's network must be the one Tempest expects). The smoke set (what
# make test runs) is the compute API's only: the network API's smoke tests take minutes of
# Neutron's time and test nothing of ours.
ALL = r"^tempest\.api\.(compute\.|network\..*\[.*\bsmoke\b.*\])"
SMOKE = r"^tempest\.api\.compute\..*\[.*\bsmoke\b.*\]"
# The scenario tests of issue 33: a server reached from outside, its network, security
# groups and moves, a snapshot booted again, servers on both hosts.
SCENARIO = (r"^tempest\.scenario\.(test_server_basic_ops|test_network_basic_ops|"
            r"test_security_groups_basic_ops|test_network_advanced_server_ops|"
            r"test_snapshot_pattern|test_server_multinode)\.")
# What make test runs of them: the smoke-tagged (a server reached from outside, its
# network's connectivity, a server on each host).
SCENARIO_SMOKE = (r"^tempest\.scenario\.(test_server_basic_ops|test_network_basic_ops|"
                  r"test_server_multinode)\..*\[.*\bsmoke\b.*\]")
SCENARIO_BUILD_TIMEOUT = 300  # a TCG guest's build and boot on this shared machine


def say(line: str) -> None:
    print(f"==> {line}", flush=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--smoke", action="store_true",
                        help="only the tests Tempest tags smoke (what make test runs)")
    parser.add_argument("--scenario", action="store_true",
                        help="the scenario tests, on real guests (scenario.py)")
    parser.add_argument("--regex", help="a narrower selection (debugging), under "
                                        "tempest.api.compute (tempest.scenario with "
                                        "--scenario)")
    parser.add_argument("--concurrency", type=int,
                        help="Tempest's workers (they mostly wait on the API): 4; 1 with "
                             "--scenario (TCG guests on two cores)")
    # Two hosts: Tempest's multi-host tests (affinity, os-hosts) need them; a fake host
    # costs nothing.
    parser.add_argument("--compute-nodes", type=int, default=2)
    parser.add_argument("--no-network", action="store_true",
                        help="no network service (Neutron): the cloud as before issue 32")
    parser.add_argument("--run-dir", type=Path, default=DEFAULT_RUN_DIR,
                        help="default: run/tempest (run/tempest-scenario with --scenario)")
    parser.add_argument("--report", type=Path,
                        help="default: run/tempest-report.txt (smoke: tempest-smoke-...)")
    parser.add_argument("--keep", action="store_true",
                        help="leave the cloud running (stop: python -m tools.local_services "
                             "down --run-dir RUN_DIR/cloud)")
    args = parser.parse_args(argv)
    # A SIGTERM (a test's timeout, a CI's) unwinds like Ctrl-C: what was started is stopped.
    signal.signal(signal.SIGTERM, _interrupted)
    tempest = TEMPEST_VENV / "bin" / "tempest"
    if not tempest.exists():
        print(f"error: Tempest is not installed in {TEMPEST_VENV}; run: tools/install.sh "
              "tempest", file=sys.stderr)
        return 1
    if args.scenario:
        regex = args.regex or (SCENARIO_SMOKE if args.smoke else SCENARIO)
        if not regex.startswith(r"^tempest\.scenario\."):
            print("error: with --scenario, --regex must select under ^tempest\\.scenario\\.",
                  file=sys.stderr)
            return 1
    else:
        regex = args.regex or (SMOKE if args.smoke else ALL)
        if not regex.startswith((r"^tempest\.api\.compute", r"^tempest\.api\.network",
                                 r"^tempest\.api\.(")):
            print("error: --regex must select under ^tempest\\.api\\.compute or network",
                  file=sys.stderr)
            return 1
    concurrency = args.concurrency or (1 if args.scenario else 4)
    name = ("tempest-scenario" if args.scenario else "tempest") + \
        ("-smoke" if args.smoke else "")
    report = args.report or REPO / "run" / f"{name}-report.txt"
    run_dir = args.run_dir if not args.scenario or args.run_dir != DEFAULT_RUN_DIR else \
        REPO / "run" / "tempest-scenario"
    workspace = run_dir / "workspace"
    started = time.monotonic()
    prefix: list[str] = []  # how Tempest is run: in the outside namespace for --scenario
    try:
        if args.scenario:
            from tools.tempest_run import scenario

            stack, facts, outside = scenario.start(run_dir / "cloud", say)
            prefix = ["ip", "netns", "exec", outside.laptop.netns]
        else:
            stack, facts = cloud.start(run_dir / "cloud", say,
                                       compute_nodes=args.compute_nodes,
                                       network=not args.no_network)
    except EtcdComputeError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    try:
        say(f"cloud ready in {time.monotonic() - started:.0f} s (compute API microversions "
            f"{facts.min_microversion} to {facts.max_microversion})")
        _init_workspace(workspace, run_dir)
        conf = workspace / "etc" / "tempest.conf"
        conf.write_text(tempest_conf(facts, workspace, **(
            {"build_timeout": SCENARIO_BUILD_TIMEOUT} if args.scenario else {})))
        conf.chmod(0o600)  # the admin's password
        ran = time.monotonic()
        code = _run(tempest, workspace, conf, regex, concurrency, prefix)
        say(f"tempest run exited {code} after {time.monotonic() - ran:.0f} s")
    finally:
        if args.keep:
            say(f"kept running: python -m tools.local_services down --run-dir "
                f"{run_dir / 'cloud'}")
        else:
            cloud.stop(stack, say, keep_logs=workspace / "logs" / "services")
    return _report(workspace, report, time.monotonic() - started)


def _interrupted(_signum: int, _frame: object) -> None:
    raise KeyboardInterrupt


def _init_workspace(workspace: Path, run_dir: Path) -> None:
    """A fresh `tempest init` workspace (its registry beside it, not in ~/.tempest)."""
    shutil.rmtree(workspace, ignore_errors=True)
    subprocess.run([str(TEMPEST_VENV / "bin" / "tempest"), "init", "--workspace-path",
                    str(run_dir / "workspaces.yaml"), "--name",
                    f"etcd-compute-{os.getpid()}", str(workspace)],
                   check=True, capture_output=True)


def _run(tempest: Path, workspace: Path, conf: Path, regex: str, concurrency: int,
         prefix: list[str]) -> int:
    """`tempest run` (after `prefix`: a namespace to run in), its output in the workspace's
    tempest-run.log; failures shown live."""
    say(f"tempest run --regex '{regex}' --concurrency {concurrency} (output: "
        f"{workspace / 'tempest-run.log'})")
    with open(workspace / "tempest-run.log", "w") as log:
        process = subprocess.Popen(
            [*prefix, str(tempest), "run", "--config-file", str(conf), "--regex", regex,
             "--concurrency", str(concurrency)],
            cwd=workspace, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
            stdin=subprocess.DEVNULL)
        assert process.stdout is not None
        done = 0
        try:
            for line in process.stdout:
                log.write(line)
                if " ... " in line:
                    done += 1
                    if "FAILED" in line:
                        test = next((word for word in line.split() if word.startswith(
                            "tempest.")), line.strip())
                        print(f"    FAILED {test}", flush=True)
                    elif done % 50 == 0:
                        print(f"    {done} tests done", flush=True)
            return process.wait()
        finally:
            if process.poll() is None:  # interrupted: Tempest and its workers go too
                process.terminate()
                try:
                    process.wait(timeout=30)
                except subprocess.TimeoutExpired:
                    process.kill()
                    process.wait()


def _report(workspace: Path, report: Path, seconds: float) -> int:
    stream = workspace / "tempest.subunit"
    with open(stream, "wb") as out:
        subprocess.run([str(TEMPEST_VENV / "bin" / "stestr"), "last", "--subunit"],
                       cwd=workspace, stdout=out, check=True)
    summary_json = workspace / "summary.json"
    subprocess.run([str(TEMPEST_VENV / "bin" / "python"), "-m", "tools.tempest_run.report",
                    str(stream), str(report), "--json", str(summary_json)], cwd=REPO,
                   check=True)
    summary = json.loads(summary_json.read_text())
    counts = summary["counts"]
    say(f"report: {report} ({seconds / 60:.1f} min in all)")
    for skip in summary["skips"]:
        print(f"    skipped {skip['count']:4d}  {skip['reason'][:150]}")
    for failure in summary["failures"]:
        print(f"    failed  {failure['id']}")
    print(f"{counts['passed']} passed, {counts['failed']} failed, "
          f"{counts['skipped']} skipped", flush=True)
    return 0 if counts["failed"] == 0 and counts["passed"] > 0 else 1


if __name__ == "__main__":
    sys.exit(main())

"""python -m tools.horizon_tests [--network] [--keep] [-k EXPRESSION] [TESTS...]

Horizon's own browser tests (`openstack_dashboard/test/selenium/integration` of the horizon
package in .venv-horizon) run against our cloud: the cloud Tempest judges
(tools/tempest_run/cloud.py: etcd, Placement, Keystone, Glance, the compute API, a controller,
one fake-driver host, two small public raw images; with `--network`, Neutron on OVN too)
and Horizon on it (tools/local_services/horizon.py); their config file (oslo.config, read from
`HORIZON_INTEGRATION_TESTS_CONFIG_FILE`) written for that cloud; pytest from .venv (Horizon's
virtualenv has no pytest or selenium) with Horizon's package on the path and the plugin
`tools.horizon_tests.chromium` (Debian's headless Chromium instead of Firefox under Xvfb).
The report: run/horizon-tests-report.txt (each test passed, failed or skipped, with its
reason), the JUnit XML beside it; screenshots of failures under the run directory. Stops
everything it started.
"""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
import time
import xml.etree.ElementTree as ElementTree
from pathlib import Path

from etcd_compute.errors import EtcdComputeError
from tools.local_services.horizon import HorizonServer
from tools.local_services.process import HORIZON_VENV, REPO, free_port
from tools.tempest_run import cloud

SITE = next((HORIZON_VENV / "lib").glob("python3*/site-packages"), HORIZON_VENV / "lib")
DASHBOARD = SITE / "openstack_dashboard"
TESTS = DASHBOARD / "test" / "selenium"
# Not run: test_regions.py reads Horizon's Django settings in the test process (Django is in
# Horizon's virtualenv only) and tests the login page's region selector, which needs
# several Keystone regions (ours has one). The `ui` directory's tests run Horizon in the
# test process with Django's live server and mocked APIs: they test Horizon, not a cloud.
IGNORED = ("integration/test_regions.py",)


def say(line: str) -> None:
    print(f"==> {line}", flush=True)


def spki_digest(cert: Path) -> str:
    import base64
    import hashlib

    from cryptography import x509
    from cryptography.hazmat.primitives.serialization import Encoding, PublicFormat

    public = x509.load_pem_x509_certificate(cert.read_bytes()).public_key()
    der = public.public_bytes(Encoding.DER, PublicFormat.SubjectPublicKeyInfo)
    return base64.b64encode(hashlib.sha256(der).digest()).decode()


def config_text(dashboard: str, auth_url: str, demo: str, admin: str, neutron: bool,
                reports: Path) -> str:
    """Horizon's integration tests' config (openstack_dashboard/test/integration_tests/
    config.py documents each option) for our cloud."""
    return f"""\
[dashboard]
dashboard_url = {dashboard.rstrip('/')}
auth_url = {auth_url}

[identity]
username = demo
password = {demo}
home_project = demo
admin_username = admin
admin_password = {admin}
admin_home_project = admin
default_keystone_role = member
default_keystone_admin_role = admin

[service_available]
neutron = {str(neutron).lower()}

[image]
images_list = {cloud.IMAGES[0]},{cloud.IMAGES[1]}

[launch_instances]
available_zone = nova
image_name = {cloud.IMAGES[0]} (1.0 MB)
flavor = m1.tiny

[selenium]
screenshots_directory = {reports}
implicit_wait = 10
message_wait = 60
"""


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("tests", nargs="*", help="test files or node ids under "
                        "openstack_dashboard/test/selenium (default: integration)")
    parser.add_argument("-k", dest="expression", help="pytest's -k")
    parser.add_argument("--network", action="store_true",
                        help="Neutron on OVN in the cloud (its networks and routers tests)")
    parser.add_argument("--run-dir", type=Path, default=REPO / "run" / "horizon-tests")
    parser.add_argument("--report", type=Path, default=REPO / "run" / "horizon-tests-report.txt")
    parser.add_argument("--keep", action="store_true", help="leave the cloud running")
    args = parser.parse_args(argv)
    # Absolute: OVN's sockets are named under the run directory, and pytest runs in it.
    args.run_dir, args.report = args.run_dir.resolve(), args.report.resolve()
    signal.signal(signal.SIGTERM, _interrupted)  # unwinds like Ctrl-C: all stopped
    if not DASHBOARD.is_dir():
        print(f"Horizon is not installed in {HORIZON_VENV} (make install)", file=sys.stderr)
        return 2
    started = time.monotonic()
    try:
        stack, described = cloud.start(args.run_dir / "cloud", say, compute_nodes=1,
                                       network=args.network)
    except (EtcdComputeError, OSError) as exc:
        print(f"the cloud did not start: {exc}", file=sys.stderr)
        return 2
    horizon = HorizonServer.create(args.run_dir / "horizon", free_port(), pki=stack.pki)
    try:
        keystone = stack._keystone()
        horizon.start(keystone.auth_url, keystone.ca_file, neutron=args.network)
        say(f"Horizon at {horizon.url} (log {horizon.log_path}); cloud up in "
            f"{time.monotonic() - started:.0f} s")
        return _run(args, horizon, keystone.password("demo"), keystone.admin_password,
                    described.auth_url)
    finally:
        if args.keep:
            say(f"left running: Horizon (pid {horizon.pid}) and the cloud in {args.run_dir}")
        else:
            horizon.stop()
            cloud.stop(stack, say, keep_logs=args.run_dir / "logs")


def _interrupted(_signum: int, _frame: object) -> None:
    raise KeyboardInterrupt


def _run(args: argparse.Namespace, horizon: HorizonServer, demo: str, admin: str,
         auth_url: str) -> int:
    run_dir: Path = args.run_dir
    reports = run_dir / "reports"
    conf = run_dir / "horizon.conf"
    conf.write_text(config_text(horizon.url, auth_url, demo, admin, args.network, reports))
    conf.chmod(0o600)
    path = run_dir / "path"  # Horizon's package alone on the path, not its virtualenv
    path.mkdir(parents=True, exist_ok=True)
    link = path / "openstack_dashboard"
    if not link.is_symlink():
        link.symlink_to(DASHBOARD)
    ini = run_dir / "pytest.ini"
    ini.write_text("[pytest]\n")
    junit = args.report.with_suffix(".xml")
    assert horizon.pki is not None
    env = {**os.environ, "PYTHONPATH": f"{path}:{REPO}",
           "HORIZON_INTEGRATION_TESTS_CONFIG_FILE": str(conf),
           "HORIZON_INTEGRATION_TESTS_LOCAL_CONFIG": str(run_dir / "none.conf"),
           "HORIZON_TESTS_SPKI": spki_digest(horizon.pki.cert("horizon")),
           "SELENIUM_HEADLESS": "True", "REQUESTS_CA_BUNDLE": str(horizon.pki.ca_cert)}
    tests = [str(TESTS / each) for each in args.tests] or [str(TESTS / "integration")]
    command = [sys.executable, "-m", "pytest", "-p", "tools.horizon_tests.chromium",
               "-c", str(ini), "--rootdir", str(TESTS), "--import-mode=importlib",
               "-p", "no:cacheprovider", "-rA", "--junitxml", str(junit),
               *(f"--ignore={TESTS / each}" for each in IGNORED), *tests]
    if args.expression:
        command += ["-k", args.expression]
    started = time.monotonic()
    done = subprocess.run(command, env=env, cwd=run_dir, check=False)
    seconds = time.monotonic() - started
    args.report.write_text(report(junit, seconds))
    say(f"report: {args.report} ({seconds:.0f} s of tests)")
    return done.returncode


def report(junit: Path, seconds: float) -> str:
    """Each test: passed, failed (the failure's first line) or skipped (the reason)."""
    if not junit.exists():
        return "no results (pytest wrote no JUnit XML)\n"
    # A test failed in its call and again in its teardown is two test cases in the XML:
    # one line here, its first failure.
    outcomes: dict[str, tuple[str, str]] = {}
    for case in ElementTree.parse(junit).iter("testcase"):
        name = f"{case.get('classname')}.{case.get('name')}"
        outcome, why = "passed", ""
        for kind in ("failure", "error", "skipped"):
            found = case.find(kind)
            if found is not None:
                outcome = "skipped" if kind == "skipped" else "failed"
                why = (found.get("message") or "").splitlines()[0][:200] if \
                    found.get("message") else ""
        if name not in outcomes or outcomes[name][0] == "passed":
            outcomes[name] = (outcome, why)
    counts = {"passed": 0, "failed": 0, "skipped": 0}
    for outcome, _ in outcomes.values():
        counts[outcome] += 1
    lines = [f"{outcome:8} {name}{f': {why}' if why else ''}"
             for name, (outcome, why) in outcomes.items()]
    head = ", ".join(f"{count} {kind}" for kind, count in counts.items())
    return f"{head} in {seconds:.0f} s\n\n" + "\n".join(sorted(lines)) + "\n"


if __name__ == "__main__":
    raise SystemExit(main())

"""docker.sh runs again (a second time, or after a reboot) without creating anything twice.

No Docker engine runs here, so `docker` is a stand-in on PATH that keeps container
state in files and records every call; what is tested is docker.sh's own logic.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

from tests.support import REPO

FAKE_DOCKER = r"""#!/usr/bin/env bash
# A stand-in for the docker CLI: containers are files in $DOCKER_STATE.
echo "$*" >> "$DOCKER_STATE/calls"
case "$1" in
  inspect)
    name=${@: -1}
    [ -f "$DOCKER_STATE/$name" ] || exit 1
    cat "$DOCKER_STATE/$name" ;;
  run)
    shift; while [ "$1" != --name ]; do shift; done
    [ -f "$DOCKER_STATE/$2" ] && { echo "Conflict: name $2 in use" >&2; exit 125; }
    echo true > "$DOCKER_STATE/$2" ;;
  start) echo true > "$DOCKER_STATE/$2" ;;
  rm) rm -f "$DOCKER_STATE/${@: -1}" ;;
  network) exit 0 ;;
esac
"""


CONTAINERS = ("etcd-compute-etcd", "etcd-compute-db", "etcd-compute-placement",
              "etcd-compute-keystone", "etcd-compute-glance")


def run_script(tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    docker = bin_dir / "docker"
    docker.write_text(FAKE_DOCKER)
    docker.chmod(0o755)
    # KEYSTONE_WAIT=0: no Keystone answers a stand-in (and one of `make up` must not be
    # bootstrapped by this run).
    env = {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}",
           "DOCKER_STATE": str(tmp_path), "PLAIN": "1", "KEYSTONE_WAIT": "0",
           "CLOUD_DIR": str(tmp_path / "cloud")}
    return subprocess.run(["bash", str(REPO / "docker.sh"), *args], capture_output=True,
                          text=True, env=env, timeout=60)


def calls(tmp_path: Path, verb: str) -> list[str]:
    lines = (tmp_path / "calls").read_text().splitlines()
    return [line for line in lines if line.startswith(verb + " ")]


def test_a_second_run_and_a_run_after_a_reboot_create_nothing_twice(tmp_path):
    first = run_script(tmp_path)
    assert first.returncode == 0, first.stderr
    assert len(calls(tmp_path, "run")) == len(CONTAINERS)
    assert "Keystone did not answer within 0 s: run ./docker.sh again" in first.stdout
    passwords = (tmp_path / "cloud" / "passwords.json").read_text()
    second = run_script(tmp_path)
    assert second.returncode == 0, second.stderr
    assert len(calls(tmp_path, "run")) == len(CONTAINERS)  # nothing created again
    assert second.stdout.count("already running") == len(CONTAINERS)
    assert (tmp_path / "cloud" / "passwords.json").read_text() == passwords  # made once
    for name in CONTAINERS:
        (tmp_path / name).write_text("false\n")  # a reboot stopped them
    third = run_script(tmp_path)
    assert third.returncode == 0, third.stderr
    assert len(calls(tmp_path, "run")) == len(CONTAINERS)
    assert len(calls(tmp_path, "start")) == len(CONTAINERS)
    down = run_script(tmp_path, "down")
    assert down.returncode == 0 and not (tmp_path / "etcd-compute-etcd").exists()


def test_the_compute_apis_config_is_the_operators_with_the_service_user(tmp_path):
    import yaml

    from etcd_compute import config as configuration
    from etcd_compute import defaults
    from etcd_compute.pki import Pki
    from tools.local_services.cloud import write_api_config
    from tools.local_services.keystone import KeystoneServer

    operator = tmp_path / "docker-schedule.yaml"
    operator.write_text("etcd: {endpoints: ['127.0.0.1:2379']}\n")
    keystone = KeystoneServer.create(tmp_path / "cloud", 5000)
    written = write_api_config(keystone, operator, tmp_path / "docker-api.yaml",
                               Pki(tmp_path / "pki"))
    assert written.stat().st_mode & 0o777 == 0o600  # it holds a password
    config = yaml.safe_load(written.read_text())
    assert config["etcd"] == {"endpoints": ["127.0.0.1:2379"]}
    authtoken = config["api"]["keystone_authtoken"]
    assert (authtoken["username"], authtoken["project_name"], authtoken["auth_type"]) == (
        "etcd-compute", "service", "password")
    assert authtoken["password"] == keystone.password("etcd-compute")
    assert authtoken["cafile"].endswith("ca.crt") and config["api"]["cert"].endswith(
        "compute-api.crt")
    merged = configuration.deep_merge(defaults.SCHEDULE_DEFAULTS, {"api": config["api"]})
    configuration.validate(merged, "schedule_config", "docker-api.yaml")

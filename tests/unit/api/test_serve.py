"""`schedule.py api`'s gunicorn settings from the config, checked before it starts."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from etcd_compute.api.serve import gunicorn_options, listen_address
from etcd_compute.errors import ConfigError
from tests.unit.api.harness import api_config

AUTH = {"auth_url": "https://127.0.0.1:5000/v3", "username": "etcd-compute"}


def test_listen_is_an_address_and_a_port():
    assert listen_address("127.0.0.1:8774") == ("127.0.0.1", 8774)
    assert listen_address("[::1]:8774") == ("::1", 8774)
    for bad in ("localhost:8774", "127.0.0.1", "127.0.0.1:0", "127.0.0.1:x"):
        with pytest.raises(ConfigError):
            listen_address(bad)


def test_options_follow_the_config(tmp_path: Path):
    cert, key = tmp_path / "api.crt", tmp_path / "api.key"
    cert.write_text("c")
    key.write_text("k")
    options = gunicorn_options(api_config(listen="[::1]:9999", workers=3, threads=4,
                                          cert=str(cert), key=str(key),
                                          keystone_authtoken=AUTH))
    assert options["bind"] == ["[::1]:9999"] and options["workers"] == 3
    assert options["worker_class"] == "gthread" and options["certfile"] == str(cert)
    sync = gunicorn_options(api_config(threads=1, keystone_authtoken=AUTH))
    assert sync["worker_class"] == "sync" and "certfile" not in sync


@pytest.mark.parametrize("api,words", [
    ({"keystone_authtoken": None}, "keystone_authtoken: required"),
    ({"keystone_authtoken": AUTH, "cert": "/nonexistent/api.crt"}, "go together"),
    ({"keystone_authtoken": AUTH, "cert": "/nonexistent/a.crt", "key": "/nonexistent/a.key"},
     "no such file"),
])
def test_a_bad_api_section_is_one_line(api, words):
    with pytest.raises(ConfigError, match=words):
        gunicorn_options(api_config(**api))


def test_the_policy_file_is_checked_without_loading_oslo_policy_here(tmp_path: Path):
    # In a process of its own: other unit tests import oslo.policy into this one.
    bad, good = tmp_path / "bad.yaml", tmp_path / "good.yaml"
    bad.write_text("{not: [yaml")
    good.write_text('"os_compute_api:servers:index": "role:reader"\n')
    script = (
        "import sys\n"
        "from etcd_compute.api.serve import check_policy\n"
        "from etcd_compute.errors import ConfigError\n"
        "check_policy(sys.argv[1]); check_policy(None)\n"
        "for path in sys.argv[2:]:\n"
        "    try:\n"
        "        check_policy(path)\n"
        "    except ConfigError as exc:\n"
        "        print('refused:', repr(str(exc)))\n"
        "print('oslo_policy' in sys.modules, 'oslo_config' in sys.modules)\n")
    done = subprocess.run([sys.executable, "-c", script, str(good), str(bad),
                           str(tmp_path / "missing.yaml")],
                          capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[0].startswith(f"refused: 'api.policy_file {bad}: ")
    assert lines[1] == f"refused: 'api.policy_file {tmp_path / 'missing.yaml'}: no such file'"
    assert lines[2:] == ["False False"]

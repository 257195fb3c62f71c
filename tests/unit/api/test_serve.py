"""`schedule.py api`'s gunicorn settings from the config, checked before it starts."""

from __future__ import annotations

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

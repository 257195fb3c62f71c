"""tests/support.py: the CI switch (which CI values count, and that a missing service skips
on a developer machine but fails the run in CI), and stopping a test's HTTP server."""

from __future__ import annotations

import socket
import time

import prometheus_client
import pytest

from tests import support
from tools.local_services import free_port


@pytest.mark.parametrize("value", ["true", "1", "yes", "TRUE", "True", "YES", " true "])
def test_ci_is_on_for_true_1_and_yes_in_any_case(value):
    assert support.in_ci({"CI": value})


@pytest.mark.parametrize("environ", [{}, {"CI": ""}, {"CI": "false"}, {"CI": "0"},
                                     {"CI": "no"}, {"CI": "off"}, {"CI": "2"},
                                     {"GITHUB_ACTIONS": "true"}])
def test_ci_is_off_otherwise(environ):
    assert not support.in_ci(environ)


def test_in_ci_reads_the_process_environment_by_default(monkeypatch):
    monkeypatch.setenv("CI", "yes")
    assert support.in_ci()
    monkeypatch.delenv("CI")
    assert not support.in_ci()


def test_a_missing_service_skips_outside_ci(monkeypatch):
    monkeypatch.delenv("CI", raising=False)
    with pytest.raises(pytest.skip.Exception, match="etcd is not installed"):
        support.unavailable("etcd is not installed")


@pytest.mark.parametrize("value", ["true", "1"])
def test_a_missing_service_fails_the_run_in_ci(monkeypatch, value):
    monkeypatch.setenv("CI", value)
    with pytest.raises(pytest.fail.Exception) as caught:
        support.unavailable("etcd is not installed")
    assert "etcd is not installed (CI=true: missing services fail the run)" in str(caught.value)
    assert not caught.value.pytrace


def test_wait_for_returns_the_first_truthy_value():
    values = iter([None, 0, "", "ready"])
    assert support.wait_for(lambda: next(values), timeout=5, interval=0) == "ready"


def test_wait_for_fails_naming_what_it_waited_for():
    with pytest.raises(AssertionError, match="timed out after 0.05 s waiting for the moon"):
        support.wait_for(lambda: False, timeout=0.05, interval=0.01, what="the moon")


def test_make_spec_is_a_valid_spec_for_the_host():
    from etcd_compute import messages

    spec = support.make_spec("0b7e4f1e-9a0c-4a51-8f0e-5d2c3b4a6e7f", name="x")
    messages.check(messages.INSTANCE_SPEC, spec)
    assert support.make_spec(spec["host"])["uuid"] != spec["uuid"]


def test_stop_server_stops_a_metrics_server_without_waiting_for_its_poll():
    port = free_port()
    server, thread = prometheus_client.start_http_server(port, "127.0.0.1")
    started = time.monotonic()
    support.stop_server(server)
    assert time.monotonic() - started < 0.4  # its loop polls every 0.5 s
    thread.join(1)
    assert not thread.is_alive()
    with pytest.raises(OSError):
        socket.create_connection(("127.0.0.1", port), timeout=1)

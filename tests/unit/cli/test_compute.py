"""compute.py in-process, for what needs no service: bad input is exit status 2 and one line
on stderr."""

from __future__ import annotations

from pathlib import Path

import pytest

from etcd_compute import logs
from etcd_compute.cli import compute
from tests.unit.cli import helpers


@pytest.fixture(autouse=True)
def quiet_logging(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(logs, "setup", lambda *_args, **_kwargs: None)


@pytest.fixture
def good_config(tmp_path: Path) -> Path:
    path = tmp_path / "compute.yaml"
    path.write_text(f"driver:\n  name: fake\ncompute:\n  state_dir: {tmp_path / 'state'}\n"
                    "etcd:\n  endpoints: ['127.0.0.1:9']\n  timeout: 0.1\n")
    return path


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    return helpers.run(compute.main, capsys, *argv)


def assert_usage_error(result: tuple[int, str, str], *fragments: str) -> None:
    helpers.assert_usage_error("compute.py", result, *fragments)


@pytest.mark.parametrize(
    ("text", "fragment"),
    [
        ("compute:\n  workers: -1\n", "compute.workers"),
        ("compute:\n  workerz: 2\n", "unknown key 'compute.workerz'"),
        ("compute: [1, 2\n", "cannot read YAML"),
        ("driver:\n  name: xen\n", "driver.name"),
    ],
)
def test_a_bad_config_file_is_exit_2_with_one_line(capsys, tmp_path, text, fragment):
    path = tmp_path / "compute.yaml"
    path.write_text(text)
    assert_usage_error(run(capsys, "--config", str(path)), str(path), fragment)


def test_a_missing_config_file_is_exit_2(capsys, tmp_path):
    assert_usage_error(run(capsys, "--config", str(tmp_path / "nope.yaml")),
                       "no such configuration file")


def test_negative_fake_hosts_is_exit_2(capsys, good_config):
    assert_usage_error(run(capsys, "--config", str(good_config), "--fake-hosts", "-1"),
                       "--fake-hosts must be positive")


def test_fake_hosts_must_be_a_number(capsys, good_config):
    assert_usage_error(run(capsys, "--config", str(good_config), "--fake-hosts", "lots"),
                       "invalid int value: 'lots'")


@pytest.mark.parametrize("argv", [["--log-level", "LOUD"], ["--frobnicate"], ["extra"]])
def test_bad_arguments_are_exit_2(capsys, argv):
    assert_usage_error(run(capsys, *argv))

"""schedule.py in-process, for what needs no service: bad input is exit status 2 and one line
on stderr, found before any connection is made."""

from __future__ import annotations

from pathlib import Path

import pytest

from etcd_compute import logs
from etcd_compute.cli import schedule
from tests.unit.cli import helpers

UUID = "0b7e4f1e-9a0c-4a51-8f0e-5d2c3b4a6e7f"


@pytest.fixture
def config(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A schedule.yaml whose services do not exist (nothing here may reach them), and a
    logging setup that leaves pytest's handlers alone."""
    monkeypatch.setattr(logs, "setup", lambda *_args, **_kwargs: None)
    path = tmp_path / "schedule.yaml"
    path.write_text("etcd:\n  endpoints: ['127.0.0.1:9']\n  timeout: 0.1\n"
                    "placement:\n  endpoint: http://127.0.0.1:9\n  timeout: 0.1\n")
    return path


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    return helpers.run(schedule.main, capsys, *argv)


def assert_usage_error(result: tuple[int, str, str], *fragments: str) -> None:
    helpers.assert_usage_error("schedule.py", result, *fragments)


def test_no_words_says_what_to_give(capsys, config):
    assert_usage_error(run(capsys, "--config", str(config)), "nothing to do")


def test_an_unknown_word_is_neither_query_uuid_nor_command(capsys, config):
    assert_usage_error(run(capsys, "--config", str(config), "frobnicate"),
                       "'frobnicate' is not a query", "destroy, stop, start, reboot")


def test_an_upper_case_uuid_is_not_taken_for_an_instance(capsys, config):
    assert_usage_error(run(capsys, "--config", str(config), UUID.upper()), "is not a query")


@pytest.mark.parametrize("words", [["destroy"], ["destroy", UUID, UUID]])
def test_destroy_needs_exactly_one_uuid(capsys, config, words):
    assert_usage_error(run(capsys, "--config", str(config), *words),
                       "destroy: expected exactly one instance uuid")


def test_destroy_of_something_not_a_uuid(capsys, config):
    assert_usage_error(run(capsys, "--config", str(config), "destroy", "web-1"),
                       "'web-1' is not an instance uuid")


def test_console_needs_exactly_one_uuid(capsys, config):
    assert_usage_error(run(capsys, "--config", str(config), "console"),
                       "console: expected exactly one instance uuid")


@pytest.mark.parametrize("command", ["list", "hosts"])
def test_list_and_hosts_take_no_arguments(capsys, config, command):
    assert_usage_error(run(capsys, "--config", str(config), command, "extra"),
                       f"{command}: takes no arguments")


def test_an_unknown_state_is_refused_before_any_connection(capsys, config):
    assert_usage_error(run(capsys, "--config", str(config), "list", "--state", "running"),
                       "--state 'running': no such state; one of SCHEDULED, BUILDING")


@pytest.mark.parametrize(("words", "option", "fragment"), [
    (["hosts"], ["--host", "hv1"], "--host, --state and --project go with list"),
    ([UUID], ["--state", "active"], "--host, --state and --project go with list"),
    (["hosts"], ["--project", "demo"], "--host, --state and --project go with list"),
    (["list"], ["--follow"], "--follow goes with console"),
    (["destroy", UUID], ["-f"], "--follow goes with console"),
])
def test_list_and_console_options_elsewhere_are_refused(capsys, config, words, option,
                                                        fragment):
    assert_usage_error(run(capsys, "--config", str(config), *words, *option), fragment)


def test_console_follow_of_something_not_a_uuid(capsys, config):
    assert_usage_error(run(capsys, "--config", str(config), "console", "web-1", "--follow"),
                       "'web-1' is not an instance uuid")


def test_a_query_in_two_words_asks_for_quoting(capsys, config):
    assert_usage_error(run(capsys, "--config", str(config), "resources=VCPU:1", "limit=2"),
                       "unexpected argument 'limit=2'", "quote the query")


@pytest.mark.parametrize(
    ("hints", "fragment"),
    [
        (["affinity"], "expected affinity=GROUP or anti-affinity=GROUP"),
        (["sideways=web"], "--hint sideways: expected affinity or anti-affinity"),
        (["affinity=web app"], "group names are 1-64"),
        (["affinity=a", "affinity=b"], "at most one server group"),
    ],
)
def test_a_bad_hint(capsys, config, hints, fragment):
    args = [arg for hint in hints for arg in ("--hint", hint)]
    assert_usage_error(run(capsys, "--config", str(config), "resources=VCPU:1", *args), fragment)


@pytest.mark.parametrize("count", ["0", "-1", "1001"])
def test_a_count_out_of_range(capsys, config, count):
    assert_usage_error(run(capsys, "--config", str(config), "resources=VCPU:1",
                           "--count", count), "--count", "expected 1..1000")


def test_a_count_that_is_not_a_number(capsys, config):
    assert_usage_error(run(capsys, "--config", str(config), "resources=VCPU:1",
                           "--count", "many"), "invalid int value: 'many'")


@pytest.mark.parametrize(
    ("query", "fragment"),
    [
        ("resources=VCPU", "malformed pair"),
        ("resources=vcpu:1", "bad resource class"),
        ("resources=VCPU:0", "out of range"),
        ("required=HW_CPU_X86_AVX2", "every request group needs resources"),
        ("resources=VCPU:1&&limit=1", "empty parameter"),
        ("resources=VCPU:1&colour=blue", "colour"),
    ],
)
def test_a_bad_query(capsys, config, query, fragment):
    assert_usage_error(run(capsys, "--config", str(config), query), fragment)


@pytest.mark.parametrize(
    ("options", "fragment"),
    [
        (["--image", "ftp://x/y.img"], "--image 'ftp://x/y.img'"),
        (["--zone", "Not/A Zone"], "--zone 'Not/A Zone': expected an aggregate uuid"),
        (["--name", "bad name"], "--name 'bad name'"),
    ],
)
def test_bad_options_of_a_request(capsys, config, options, fragment):
    assert_usage_error(run(capsys, "--config", str(config), "resources=VCPU:1", *options),
                       fragment)


def test_an_unreadable_user_data_file(capsys, config, tmp_path):
    missing = tmp_path / "missing.yaml"
    assert_usage_error(run(capsys, "--config", str(config), "resources=VCPU:1",
                           "--user-data", str(missing)),
                       f"--user-data {missing}: cannot read (FileNotFoundError)")


def test_an_unknown_option(capsys, config):
    assert_usage_error(run(capsys, "--config", str(config), "list", "--colour"),
                       "unrecognized arguments: --colour")


def test_a_bad_config_file_is_exit_2(capsys, tmp_path, config):
    bad = tmp_path / "bad.yaml"
    bad.write_text("scheduler:\n  max_attempts: 0\n")
    assert_usage_error(run(capsys, "--config", str(bad), "list"), "scheduler.max_attempts")
    assert_usage_error(run(capsys, "--config", str(tmp_path / "none.yaml"), "list"),
                       "no such configuration file")


def test_a_request_without_what_the_libvirt_driver_needs_is_refused_before_any_claim(
        capsys, config):
    """`resources=VCPU:1,DISK_GB:1` once got claimed and then raised KeyError in the driver."""
    assert_usage_error(run(capsys, "--config", str(config), "resources=VCPU:1,DISK_GB:1"),
                       "resources: MEMORY_MB missing", "scheduler.required_resources")


# -- terminal control sequences from elsewhere are shown, not obeyed --------------------------

HOSTILE = "\x1b]0;owned\x07\x1b[2J\x9b31m\x00\x08"


def test_console_text_has_control_sequences_neutralised(capsys, config, monkeypatch):
    """A guest writes its console; `schedule.py console` once passed ESC and friends through."""
    import contextlib
    import types

    from etcd_compute.scheduler import operations

    monkeypatch.setattr(schedule.zones_cli, "instance_zone", lambda _config, _uuid:
                        contextlib.nullcontext(types.SimpleNamespace(store=None)))
    monkeypatch.setattr(operations, "console",
                        lambda _store, _uuid: f"login:\t{HOSTILE}\nsecond line\n")
    code, out, err = run(capsys, "--config", str(config), "console", UUID)
    assert code == 0 and err == ""
    assert out == ("login:\t\\x1b]0;owned\\x07\\x1b[2J\\x9b31m\\x00\\x08\nsecond line\n")
    assert not any(ch in out for ch in "\x1b\x07\x9b\x00\x08")


@pytest.mark.parametrize("argv", [
    ["--frobnicate" + HOSTILE],  # argparse's own error echoes it
    ["resources=VCPU:1", "--hint", f"sideways{HOSTILE}=g"],
    ["resources=VCPU:1", "--name", f"web{HOSTILE}\nsecond"],
    ["destroy", f"x{HOSTILE}"],
])
def test_user_strings_echoed_in_errors_are_neutralised(capsys, config, argv):
    code, out, err = run(capsys, "--config", str(config), *argv)
    assert code == 2 and out == ""
    assert len(err.splitlines()) == 1 and err.endswith("\n")
    assert not any(ch in err for ch in "\x1b\x07\x9b\x00\x08")


# --- lifecycle actions: bad input is found before any connection ----------------------

QUERY = "resources=VCPU:2,MEMORY_MB:512,DISK_GB:1"


@pytest.mark.parametrize(("words", "fault"), [
    (["stop"], "stop: expected exactly one instance uuid"),
    (["reboot", UUID, UUID], "reboot: expected exactly one instance uuid"),
    (["start", "web-1"], "'web-1' is not an instance uuid"),
    (["resize", UUID], "resize: expected QUERY UUID"),
    (["resize", QUERY], "resize: expected QUERY UUID"),
    (["resize", QUERY + "&in_tree=" + UUID, UUID], "resources=... only"),
    (["resize", QUERY + "&required=CUSTOM_ELSEWHERE", UUID], "resources=... only"),
    (["resize", "resources=VCPU:2,MEMORY_MB:512", UUID], "DISK_GB missing"),
    (["resize", "resources=VCPU:99999999999,MEMORY_MB:1,DISK_GB:1", UUID], "bad amount"),
    (["events"], "events: expected exactly one instance uuid"),
    (["stop", "--hard", UUID], "--hard goes with reboot"),
    (["stop", "--image", "file:///x", UUID], "--image goes with a query or rebuild"),
    (["rebuild", "--image", "ftp://host/x.img", UUID], "--image 'ftp://host/x.img'"),
])
def test_lifecycle_input_is_refused_before_any_connection(capsys, config, words, fault):
    assert_usage_error(run(capsys, "--config", str(config), *words), fault)


def test_show_names_the_action_running_and_who_asked(capsys, config, monkeypatch):
    import contextlib
    import types

    from etcd_compute.scheduler import operations

    record = {"uuid": UUID, "state": "REBOOTING", "host": None, "resources": None,
              "task": {"id": UUID, "action": "reboot", "by": f"bob@ops{HOSTILE}", "at": 1.0,
                       "from": "ACTIVE"}}
    monkeypatch.setattr(schedule.zones_cli, "instance_zone", lambda _config, _uuid:
                        contextlib.nullcontext(types.SimpleNamespace(store=None, path="")))
    monkeypatch.setattr(operations, "show", lambda _store, _uuid: record)
    code, out, err = run(capsys, "--config", str(config), UUID)
    assert code == 0 and err == ""
    state = next(line for line in out.splitlines() if line.startswith("state "))
    assert state.split(None, 1)[1].startswith("REBOOTING (reboot asked by bob@ops")
    assert not any(ch in out for ch in "\x1b\x07\x9b\x00\x08")
    record["task"] = None
    code, out, _err = run(capsys, "--config", str(config), UUID)
    assert code == 0 and "state      REBOOTING\n" in out

"""schedule.py in-process: a first word that is a query, a uuid or a command, each command
with its own help and options, and bad input as exit status 2 and one line on stderr,
found before any connection is made. The commands' own checks: test_instances.py,
test_actions.py, test_console.py, test_hosts.py, test_zones.py."""

from __future__ import annotations

import pytest

from etcd_compute.cli import schedule as schedule_cli
from tests.unit.cli.helpers import HOSTILE, UUID, schedule, schedule_usage_error


def test_no_words_says_what_to_give(capsys, config):
    schedule_usage_error(schedule(capsys, "--config", str(config)), "nothing to do")


def test_an_unknown_word_is_neither_query_uuid_nor_command(capsys, config):
    schedule_usage_error(schedule(capsys, "--config", str(config), "frobnicate"),
                         "'frobnicate' is not a query", "destroy, list, console, stop, start")


def test_an_upper_case_uuid_is_not_taken_for_an_instance(capsys, config):
    schedule_usage_error(schedule(capsys, "--config", str(config), UUID.upper()), "is not a query")


@pytest.mark.parametrize("command", ["list", "hosts"])
def test_list_and_hosts_take_no_arguments(capsys, config, command):
    schedule_usage_error(schedule(capsys, "--config", str(config), command, "extra"),
                         f"{command}: takes no arguments")


@pytest.mark.parametrize(("words", "option", "fragment"), [
    (["hosts"], ["--host", "hv1"], "--host goes with list"),
    ([UUID], ["--state", "active"], "--state goes with list"),
    (["hosts"], ["--project", "demo"], "--project goes with list"),
    (["list"], ["--follow"], "--follow goes with console"),
    (["destroy", UUID], ["-f"], "--follow goes with console"),
])
def test_list_and_console_options_elsewhere_are_refused(capsys, config, words, option,
                                                        fragment):
    schedule_usage_error(schedule(capsys, "--config", str(config), *words, *option), fragment)


def test_a_query_in_two_words_asks_for_quoting(capsys, config):
    schedule_usage_error(schedule(capsys, "--config", str(config), "resources=VCPU:1", "limit=2"),
                         "unexpected argument 'limit=2'", "quote the query")


def test_an_unknown_option(capsys, config):
    schedule_usage_error(schedule(capsys, "--config", str(config), "list", "--colour"),
                         "unrecognized arguments: --colour")


def test_a_bad_config_file_is_exit_2(capsys, tmp_path, config):
    bad = tmp_path / "bad.yaml"
    bad.write_text("scheduler:\n  max_attempts: 0\n")
    schedule_usage_error(schedule(capsys, "--config", str(bad), "list"), "scheduler.max_attempts")
    schedule_usage_error(schedule(capsys, "--config", str(tmp_path / "none.yaml"), "list"),
                         "no such configuration file")


@pytest.mark.parametrize("argv", [
    ["--frobnicate" + HOSTILE],  # argparse's own error echoes it
    ["resources=VCPU:1", "--hint", f"sideways{HOSTILE}=g"],
    ["resources=VCPU:1", "--name", f"web{HOSTILE}\nsecond"],
    ["destroy", f"x{HOSTILE}"],
])
def test_user_strings_echoed_in_errors_are_neutralised(capsys, config, argv):
    code, out, err = schedule(capsys, "--config", str(config), *argv)
    assert code == 2 and out == ""
    assert len(err.splitlines()) == 1 and err.endswith("\n")
    assert not any(ch in err for ch in "\x1b\x07\x9b\x00\x08")


# --- a first word, commands, per-command help -----------------------------------------------

SEED_QUERY = "resources=VCPU:1,DISK_GB:1,MEMORY_MB:5"


def test_the_seeds_command_lines_mean_what_they_meant():
    placed = schedule_cli.parse_args([SEED_QUERY])
    assert (placed.command, placed.query, placed.count, placed.implicit) == (
        "place", SEED_QUERY, 1, True)
    shown = schedule_cli.parse_args([UUID])
    assert (shown.command, shown.uuid) == ("show", UUID)
    destroyed = schedule_cli.parse_args(["destroy", UUID])
    assert (destroyed.command, destroyed.uuid, destroyed.implicit) == ("destroy", UUID, False)


def test_options_before_the_first_word_go_with_its_command():
    placed = schedule_cli.parse_args(["--config", "c.yaml", "--count", "3", "--wait",
                                      SEED_QUERY, "--name", "web"])
    assert (placed.command, placed.config, placed.count, placed.wait, placed.name) == (
        "place", "c.yaml", 3, True, "web")
    listed = schedule_cli.parse_args(["--json", "list", "--config=c.yaml"])
    assert (listed.command, listed.json, listed.config) == ("list", True, "c.yaml")
    # An option's value is never taken for the first word.
    named = schedule_cli.parse_args(["--name", "destroy", SEED_QUERY])
    assert (named.command, named.name) == ("place", "destroy")
    hosted = schedule_cli.parse_args(["--config", "c.yaml", "host", "drain", "hv1", "--json"])
    assert (hosted.command, hosted.action, hosted.host, hosted.json, hosted.config) == (
        "host", "drain", "hv1", True, "c.yaml")
    # Given anywhere, at any depth, the common options are kept; absent, they are None.
    for argv in (["zone", "--config", "c.yaml", "list"], ["zone", "list", "--config", "c.yaml"],
                 ["--config", "c.yaml", "zone", "add", "x", "--etcd", "h:1"]):
        assert schedule_cli.parse_args(argv).config == "c.yaml", argv
    bare = schedule_cli.parse_args(["zone", "list"])
    assert (bare.config, bare.log_level) == (None, None)


@pytest.mark.parametrize(("argv", "has", "has_not"), [
    (["stop", "--help"], ["usage: schedule.py stop", "UUID", "--wait", "--json", "--config"],
     ["--count", "--hard", "--reason", "--follow", "--image", "--host", "--etcd", "--force"]),
    (["reboot", "--help"], ["usage: schedule.py reboot", "--hard"], ["--count", "--image"]),
    ([SEED_QUERY, "--help"], ["usage: schedule.py place", "--count", "--hint", "QUERY keys"],
     ["--hard", "--follow", "--reason"]),
    (["host", "disable", "--help"], ["usage: schedule.py host disable", "--reason", "HOST"],
     ["--count", "--wait"]),
    (["zone", "add", "--help"], ["usage: schedule.py zone add", "--etcd", "--cert-key"],
     ["--force", "--wait"]),
])
def test_each_command_has_its_own_help_with_only_its_options(capsys, argv, has, has_not):
    with pytest.raises(SystemExit) as exited:
        schedule_cli.main(argv)
    assert exited.value.code == 0
    out = capsys.readouterr().out
    assert all(text in out for text in has), out
    assert not any(text in out for text in has_not), out


def test_the_help_names_every_command_and_the_first_words(capsys):
    with pytest.raises(SystemExit):
        schedule_cli.main(["--help"])
    out = capsys.readouterr().out
    assert out.startswith("usage: schedule.py [--config PATH] (QUERY | UUID | COMMAND ...)")
    _parser, every = schedule_cli.build_parser()
    commands = [path for path in every if " " not in path]
    assert commands[:3] == ["place", "show", "destroy"] and "serve" in commands \
        and "api" in commands
    assert all(f"\n    {command} " in out for command in commands)
    assert "is a query if it contains '='" in out

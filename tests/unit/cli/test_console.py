"""schedule.py console (cli/console.py): a guest's text is shown, never obeyed; a CRLF is a
line end, even split between two updates of --follow."""

from __future__ import annotations

import json

from etcd_compute.cli import zones as zones_cli
from etcd_compute.cli.console import JsonSink, TerminalSink
from etcd_compute.ops.console_follow import RESTARTED
from tests.unit.cli.helpers import HOSTILE, UUID, schedule, schedule_usage_error


def test_console_needs_exactly_one_uuid(capsys, config):
    schedule_usage_error(schedule(capsys, "--config", str(config), "console"),
                         "console: expected exactly one instance uuid")


def test_console_follow_of_something_not_a_uuid(capsys, config):
    schedule_usage_error(schedule(capsys, "--config", str(config), "console", "web-1", "--follow"),
                         "'web-1' is not an instance uuid")


def test_console_text_has_control_sequences_neutralised(capsys, config, monkeypatch):
    """A guest writes its console; `schedule.py console` once passed ESC and friends through."""
    import contextlib
    import types

    from etcd_compute.ops import operations

    monkeypatch.setattr(zones_cli, "instance_zone", lambda _config, _uuid:
                        contextlib.nullcontext(types.SimpleNamespace(store=None)))
    monkeypatch.setattr(operations, "console",
                        lambda _store, _uuid: f"login:\t{HOSTILE}\nsecond line\n")
    code, out, err = schedule(capsys, "--config", str(config), "console", UUID)
    assert code == 0 and err == ""
    assert out == ("login:\t\\x1b]0;owned\\x07\\x1b[2J\\x9b31m\\x00\\x08\nsecond line\n")
    assert not any(ch in out for ch in "\x1b\x07\x9b\x00\x08")


# --- --follow: what the guest writes, update by update ----------------------------------


def follow_sink(*updates: str, end: str | None = None):
    sink = TerminalSink()
    for text in updates:
        sink.text(text)
    if end is not None:
        sink.ended(0, end)
    return sink


def test_a_crlf_split_between_two_updates_is_one_line_end(capsys):
    follow_sink("Debian login:\r", "\nok\r\n")
    assert capsys.readouterr().out == "Debian login:\nok\n"


def test_a_lone_cr_is_shown_once_the_next_update_says_so(capsys):
    follow_sink("10%\r", "20%")
    assert capsys.readouterr().out == "10%\\x0d20%"


def test_a_held_cr_is_shown_before_our_own_line(capsys):
    follow_sink("booting\r", end="INSTANCE GONE")
    assert capsys.readouterr().out == "booting\\x0d\nINSTANCE GONE\n"


def test_our_lines_start_on_a_line_of_their_own_and_controls_stay_escaped(capsys):
    sink = follow_sink(f"a{HOSTILE}")
    sink.restarted()
    sink.note("etcd watch lost")
    captured = capsys.readouterr()
    assert captured.out == "a\\x1b]0;owned\\x07\\x1b[2J\\x9b31m\\x00\\x08\n" + RESTARTED + "\n"
    assert not any(ch in captured.out for ch in "\x1b\x07\x9b\x00\x08\r")
    assert captured.err == "schedule.py: etcd watch lost\n"


def test_json_lines_carry_the_guests_text_as_it_is(capsys):
    sink = JsonSink(UUID)
    sink.text("login:\r\n")
    sink.restarted()
    sink.text("again")
    sink.ended(1, "INSTANCE GONE")
    lines = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert lines == [{"uuid": UUID, "text": "login:\r\n", "restarted": False},
                     {"uuid": UUID, "text": "again", "restarted": True},
                     {"uuid": UUID, "end": "INSTANCE GONE", "status": 1}]


def test_console_url_prints_the_operators_novnc_url(capsys, config, monkeypatch):
    import contextlib
    import types

    from etcd_compute.ops import operations

    monkeypatch.setattr(zones_cli, "instance_zone", lambda _config, _uuid:
                        contextlib.nullcontext(types.SimpleNamespace(store=None)))
    asked = []
    monkeypatch.setattr(operations, "remote_console", lambda _store, uuid, settings: (
        asked.append((uuid, settings["token_ttl_seconds"])) or "http://p/vnc_lite.html?x"))
    code, out, err = schedule(capsys, "--config", str(config), "console", UUID, "--url")
    assert (code, out, err) == (0, "http://p/vnc_lite.html?x\n", "")
    assert asked == [(UUID, 600)]
    code, out, _ = schedule(capsys, "--config", str(config), "console", UUID, "--url",
                            "--json")
    assert json.loads(out) == {"uuid": UUID, "type": "novnc", "url": "http://p/vnc_lite.html?x"}


def test_console_url_on_a_host_without_a_relay_says_so(capsys, config, monkeypatch):
    import contextlib
    import types

    from etcd_compute.ops import operations

    monkeypatch.setattr(zones_cli, "instance_zone", lambda _config, _uuid:
                        contextlib.nullcontext(types.SimpleNamespace(store=None)))

    def refuse(_store, uuid, _settings):
        raise operations.NoRemoteConsole(f"the host of {uuid} serves no remote console")

    monkeypatch.setattr(operations, "remote_console", refuse)
    code, out, err = schedule(capsys, "--config", str(config), "console", UUID, "--url")
    assert code != 0 and out == "" and "serves no remote console" in err
    schedule_usage_error(schedule(capsys, "--config", str(config), "console", UUID, "--url",
                                  "--follow"), "not allowed with argument")

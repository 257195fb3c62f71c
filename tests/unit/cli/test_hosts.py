"""schedule.py's host commands (cli/hosts.py): each action its words and options; what
host show and the hosts table print, names from elsewhere escaped."""

from __future__ import annotations

import contextlib

import pytest

from etcd_compute.cli import hosts as hosts_cli
from tests.unit.cli.helpers import HOSTILE, UUID, schedule, schedule_usage_error


@pytest.mark.parametrize(("words", "fault"), [
    (["host"], "host: expected host disable|enable|show|drain HOST"),
    (["host", "frob", "hv1"], "host: expected host disable|enable|show|drain HOST"),
    (["host", "show"], "host show: expected one HOST"),
    (["host", "drain", "hv1", "hv2"], "host drain: expected one HOST"),
    (["host", "enable", "hv1", "--reason", "x"], "--reason goes with host disable"),
    (["hosts", "--wait"], "--wait goes with a query, destroy, stop"),
])
def test_host_words_and_options(capsys, config, words, fault):
    schedule_usage_error(schedule(capsys, "--config", str(config), *words), fault)


@pytest.fixture
def offline(monkeypatch):
    """No connection: the commands get nothing to talk to, the operations are faked."""
    monkeypatch.setattr(hosts_cli, "store_of", lambda _config: contextlib.nullcontext(None))
    monkeypatch.setattr(hosts_cli, "placement_of", lambda _config: None)


def test_host_show_prints_state_and_why_it_is_disabled(capsys, config, monkeypatch, offline):
    from etcd_compute.ops import maintenance

    shown = {"uuid": UUID, "name": f"hv1{HOSTILE}", "state": "disabled", "up_since": None,
             "disabled": True, "maintenance": {"since": 0.0, "by": "ann", "reason": "disks"},
             "instances": [{"uuid": UUID, "state": "ACTIVE", "name": None}]}
    monkeypatch.setattr(maintenance, "show", lambda _store, _placement, host: shown)
    code, out, err = schedule(capsys, "--config", str(config), "host", "show", "hv1")
    assert (code, err) == (0, "")
    lines = out.splitlines()
    assert lines[0] == "name       hv1\\x1b]0;owned\\x07\\x1b[2J\\x9b31m\\x00\\x08"
    assert "state      disabled" in lines and "up since   -" in lines
    assert any(line.startswith("disabled   since ") and line.endswith("by ann: disks")
               for line in lines)
    assert lines[-1] == f"  {UUID} ACTIVE -"


@pytest.mark.parametrize(("action", "printed"), [("disable", "DISABLED"),
                                                 ("enable", "ENABLED")])
def test_host_disable_and_enable_say_what_they_did(capsys, config, monkeypatch, offline,
                                                   action, printed):
    from etcd_compute.ops import maintenance

    done: list[tuple] = []
    monkeypatch.setattr(maintenance, "disable", lambda _s, _p, host, reason:
                        done.append((host, reason)) or {"uuid": UUID, "name": "hv1"})
    monkeypatch.setattr(maintenance, "enable", lambda _s, _p, host:
                        done.append((host,)) or {"uuid": UUID, "name": "hv1"})
    extra = ["--reason", "new disks"] if action == "disable" else []
    code, out, _err = schedule(capsys, "--config", str(config), "host", action, "hv1", *extra)
    assert code == 0 and out == f"HOST hv1 ({UUID}) {printed}\n"
    assert done == ([("hv1", "new disks")] if action == "disable" else [("hv1",)])


def test_the_hosts_table_has_a_column_per_resource_class(capsys, config, monkeypatch,
                                                         offline):
    from etcd_compute.ops import operations

    found = [{"uuid": UUID, "name": "hv1", "alive": True, "disabled": False, "instances": 2,
              "resources": {"VCPU": {"used": 2, "capacity": 8}}},
             {"uuid": UUID, "name": "hv2", "alive": False, "disabled": True, "instances": 0,
              "resources": {"MEMORY_MB": {"used": 0, "capacity": 1024}}}]
    monkeypatch.setattr(operations, "hosts", lambda _store, _placement: found)
    code, out, _err = schedule(capsys, "--config", str(config), "hosts")
    header, first, second = out.splitlines()
    assert code == 0 and header.split() == ["NAME", "UUID", "ALIVE", "STATUS", "INSTANCES",
                                            "MEMORY_MB", "used/cap", "VCPU", "used/cap"]
    assert first.split() == ["hv1", UUID, "yes", "enabled", "2", "-", "2/8"]
    assert second.split() == ["hv2", UUID, "NO", "DISABLED", "0", "0/1024", "-"]

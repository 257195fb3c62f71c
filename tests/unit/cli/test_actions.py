"""schedule.py's actions (cli/actions.py): bad input is found before any connection."""

from __future__ import annotations

import json

import pytest

from tests.unit.cli.helpers import UUID, schedule, schedule_usage_error

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
    (["security-groups", UUID], "security-groups: expected default|none UUID"),
    (["security-groups", "web", UUID], "security-groups: expected default|none UUID"),
])
def test_lifecycle_input_is_refused_before_any_connection(capsys, config, words, fault):
    schedule_usage_error(schedule(capsys, "--config", str(config), *words), fault)


# --- what an action asks, and what it prints ---------------------------------------------


@pytest.fixture
def asked(monkeypatch):
    """Every lifecycle.request the command makes (the zone is this one, not connected)."""
    import contextlib
    import types

    from etcd_compute.cli import zones as zones_cli
    from etcd_compute.ops import lifecycle

    calls: list[dict] = []

    def request(_store, _placement, uuid, action, **params):
        calls.append({"uuid": uuid, "action": action, **params})
        return lifecycle.Requested(uuid, "rp", action, {"id": "r-1"})

    monkeypatch.setattr(zones_cli, "instance_zone", lambda _config, _uuid:
                        contextlib.nullcontext(types.SimpleNamespace(store=None,
                                                                     placement=None)))
    monkeypatch.setattr(lifecycle, "request", request)
    return calls


@pytest.mark.parametrize(("words", "action", "params"), [
    (["stop", UUID], "stop", {}),
    (["reboot", "--hard", UUID], "reboot", {"hard": True}),
    (["rebuild", UUID, "--image", "https://images/x.qcow2"], "rebuild",
     {"image_url": "https://images/x.qcow2"}),
    (["resize", QUERY, UUID], "resize",
     {"resources": {"VCPU": 2, "MEMORY_MB": 512, "DISK_GB": 1}}),
    (["revert-resize", UUID], "resize", {"revert": True}),
    (["security-groups", "none", UUID], "security-groups", {"security_groups": []}),
    (["security-groups", "default", UUID], "security-groups", {"security_groups": ["default"]}),
])
def test_an_action_asks_with_its_own_options_and_says_so(capsys, config, asked, words, action,
                                                          params):
    from etcd_compute.ops import lifecycle

    code, out, err = schedule(capsys, "--config", str(config), *words)
    assert (code, err) == (0, "")
    assert out == f"{words[0].upper()} REQUESTED FOR INSTANCE {UUID}\n"
    assert asked == [{"uuid": UUID, "action": action, "asked": lifecycle.Asked(**params)}]


def test_confirm_resize_frees_the_hold_and_says_so(capsys, config, monkeypatch, asked):
    from etcd_compute.ops import lifecycle

    confirmed = []
    monkeypatch.setattr(lifecycle, "confirm_resize",
                        lambda _store, _placement, uuid: confirmed.append(uuid) or {})
    code, out, _err = schedule(capsys, "--config", str(config), "confirm-resize", UUID)
    assert (code, out, confirmed) == (0, f"RESIZE CONFIRMED FOR INSTANCE {UUID}\n", [UUID])


def test_an_action_as_json(capsys, config, asked):
    code, out, _err = schedule(capsys, "--config", str(config), "start", UUID, "--json")
    assert code == 0
    assert json.loads(out) == {"uuid": UUID, "host": "rp", "action": "start",
                               "request_id": "r-1", "outcome": "requested"}


@pytest.fixture
def reverting(monkeypatch):
    """migrate-revert over no store: the revert answers the start to follow, the wait what
    the record showed (`ended`: the start's event)."""
    import contextlib

    from etcd_compute.cli import actions
    from etcd_compute.ops import lifecycle

    followed: list[str] = []
    ended = {"event": {"result": "success"}}
    monkeypatch.setattr(actions, "store_of", lambda _c: contextlib.nullcontext(None))
    monkeypatch.setattr(actions, "placement_of", lambda _c: None)
    monkeypatch.setattr(lifecycle, "revert_move", lambda _s, _p, uuid: lifecycle.Requested(
        uuid, "rp", "start", {"id": "r-1"}))

    def wait(_store, requested, _timeout, _seen):
        followed.append(requested.request["id"])
        return lifecycle.Outcome({"state": "ACTIVE"}, ended["event"])

    monkeypatch.setattr(lifecycle, "wait", wait)
    return followed, ended


def test_migrate_revert_answers_at_once_and_with_wait_follows_the_start(capsys, config,
                                                                        reverting):
    followed, ended = reverting
    code, out, _err = schedule(capsys, "--config", str(config), "migrate-revert", UUID)
    assert (code, followed) == (0, [])
    assert out == (f"MIGRATION OF {UUID} REVERTED: STARTS AGAIN ONCE ITS DESTINATION "
                   "DISCARDED ITS COPY\n")
    code, out, _err = schedule(capsys, "--config", str(config), "migrate-revert", UUID,
                               "--wait")
    assert (code, followed) == (0, ["r-1"])
    ended["event"] = {"result": "error", "error": "no disk"}
    code, _out, err = schedule(capsys, "--config", str(config), "migrate-revert", UUID,
                               "--wait")
    assert code == 1 and "not started again: no disk" in err

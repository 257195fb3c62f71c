"""schedule.py's instance commands (cli/instances.py): a request's bad input is refused
before any claim or connection; show names the action running; destroy's words."""

from __future__ import annotations

import contextlib

import pytest

from etcd_compute.cli import zones as zones_cli
from tests.unit.cli.helpers import HOSTILE, UUID, schedule, schedule_usage_error


@pytest.mark.parametrize("words", [["destroy"], ["destroy", UUID, UUID]])
def test_destroy_needs_exactly_one_uuid(capsys, config, words):
    schedule_usage_error(schedule(capsys, "--config", str(config), *words),
                         "destroy: expected exactly one instance uuid")


def test_destroy_of_something_not_a_uuid(capsys, config):
    schedule_usage_error(schedule(capsys, "--config", str(config), "destroy", "web-1"),
                         "'web-1' is not an instance uuid")


def test_an_unknown_state_is_refused_before_any_connection(capsys, config):
    schedule_usage_error(schedule(capsys, "--config", str(config), "list", "--state", "running"),
                         "--state 'running': no such state; one of SCHEDULED, BUILDING")


@pytest.mark.parametrize(
    ("hints", "fragment"),
    [
        (["affinity"], "expected affinity=GROUP or anti-affinity=GROUP"),
        (["sideways=web"], "--hint sideways: expected affinity, anti-affinity, soft-affinity"),
        (["affinity=web app"], "group names are 1-64"),
        (["affinity=a", "affinity=b"], "at most one server group"),
    ],
)
def test_a_bad_hint(capsys, config, hints, fragment):
    args = [arg for hint in hints for arg in ("--hint", hint)]
    schedule_usage_error(schedule(capsys, "--config", str(config), "resources=VCPU:1", *args),
                         fragment)


@pytest.mark.parametrize("count", ["0", "-1", "1001"])
def test_a_count_out_of_range(capsys, config, count):
    schedule_usage_error(schedule(capsys, "--config", str(config), "resources=VCPU:1",
                                  "--count", count), "--count", "expected 1..1000")


def test_a_count_that_is_not_a_number(capsys, config):
    schedule_usage_error(schedule(capsys, "--config", str(config), "resources=VCPU:1",
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
    schedule_usage_error(schedule(capsys, "--config", str(config), query), fragment)


@pytest.mark.parametrize(
    ("options", "fragment"),
    [
        (["--image", "ftp://x/y.img"], "--image 'ftp://x/y.img'"),
        (["--zone", "Not/A Zone"], "--zone 'Not/A Zone': expected an aggregate uuid"),
        (["--name", "bad name"], "--name 'bad name'"),
    ],
)
def test_bad_options_of_a_request(capsys, config, options, fragment):
    schedule_usage_error(schedule(capsys, "--config", str(config), "resources=VCPU:1", *options),
                         fragment)


def test_an_unreadable_user_data_file(capsys, config, tmp_path):
    missing = tmp_path / "missing.yaml"
    schedule_usage_error(schedule(capsys, "--config", str(config), "resources=VCPU:1",
                                  "--user-data", str(missing)),
                         f"--user-data {missing}: cannot read (FileNotFoundError)")


def test_a_request_without_what_the_libvirt_driver_needs_is_refused_before_any_claim(
        capsys, config):
    """`resources=VCPU:1,DISK_GB:1` once got claimed and then raised KeyError in the driver."""
    schedule_usage_error(schedule(capsys, "--config", str(config), "resources=VCPU:1,DISK_GB:1"),
                         "resources: MEMORY_MB missing", "scheduler.required_resources")


def test_show_names_the_action_running_and_who_asked(capsys, config, monkeypatch):
    import contextlib
    import types

    from etcd_compute.ops import operations

    record = {"uuid": UUID, "state": "REBOOTING", "host": None, "resources": None,
              "task": {"id": UUID, "action": "reboot", "by": f"bob@ops{HOSTILE}", "at": 1.0,
                       "from": "ACTIVE"}}
    monkeypatch.setattr(zones_cli, "instance_zone", lambda _config, _uuid:
                        contextlib.nullcontext(types.SimpleNamespace(store=None, path="")))
    monkeypatch.setattr(operations, "show", lambda _store, _uuid: record)
    code, out, err = schedule(capsys, "--config", str(config), UUID)
    assert code == 0 and err == ""
    state = next(line for line in out.splitlines() if line.startswith("state "))
    assert state.split(None, 1)[1].startswith("REBOOTING (reboot asked by bob@ops")
    assert not any(ch in out for ch in "\x1b\x07\x9b\x00\x08")
    record["task"] = None
    code, out, _err = schedule(capsys, "--config", str(config), UUID)
    assert code == 0 and "state      REBOOTING\n" in out


@pytest.mark.parametrize(("groups", "line"), [
    (None, "secgroups  default\n"),  # a record of before: built in default
    (["default"], "secgroups  default\n"), ([], "secgroups  none\n")])
def test_show_says_the_instances_security_groups(capsys, config, monkeypatch, groups, line):
    import contextlib
    import types

    from etcd_compute.ops import operations

    record = {"uuid": UUID, "state": "ACTIVE", "host": None, "resources": None,
              **({} if groups is None else {"security_groups": groups})}
    monkeypatch.setattr(zones_cli, "instance_zone", lambda _config, _uuid:
                        contextlib.nullcontext(types.SimpleNamespace(store=None, path="")))
    monkeypatch.setattr(operations, "show", lambda _store, _uuid: record)
    code, out, _err = schedule(capsys, "--config", str(config), UUID)
    assert code == 0 and line in out


@pytest.mark.parametrize(("options", "network"), [([], True), (["--no-network"], False)])
def test_no_network_asks_for_guests_without_a_network(capsys, config, monkeypatch, options,
                                                      network):
    """`--no-network` reaches the request (its spec's `network: false`); without it the
    guests are on a network."""
    from etcd_compute.cli import instances

    asked = []

    def select(_config, _store, request_spec):
        asked.append(request_spec.network)
        return [], 0

    monkeypatch.setattr(instances, "store_of", lambda _config: contextlib.nullcontext(None))
    monkeypatch.setattr(zones_cli, "federated", lambda _store, _route: False)
    monkeypatch.setattr(instances, "_select", select)
    code, _out, err = schedule(capsys, "--config", str(config), "resources=VCPU:1,"
                               "MEMORY_MB:64,DISK_GB:1", *options)
    assert (code, err, asked) == (0, "", [network])

"""An operator's actions on the compute side (compute/actions.py), against in-memory etcd,
Placement and pool and the real file-backed fake driver: each allowed action from each
state it starts from, hostile specs refused, destroy at any moment, failures that leave
the instance as it was, restarts that resume an action."""

from __future__ import annotations

import concurrent.futures
import json
from pathlib import Path
from typing import Any

import pytest

from etcd_compute import claims, events, messages
from etcd_compute.compute.pool import STOP
from etcd_compute.instances import actions as action_txn
from etcd_compute.instances import records
from tests.unit.compute.test_machine import Host

NEW_SIZE = {"VCPU": 2, "MEMORY_MB": 128, "DISK_GB": 2}
# The state each action passes through (the actions table of
# docs/reference/instance-states.md, not `states.ACTIONS`).
PASSES = {"stop": "STOPPING", "start": "STARTING", "reboot": "REBOOTING",
          "rebuild": "REBUILDING", "resize": "RESIZING"}
ALLOWED = [("stop", "ACTIVE", "SHUTOFF"), ("start", "SHUTOFF", "ACTIVE"),
           ("reboot", "ACTIVE", "ACTIVE"), ("rebuild", "ACTIVE", "ACTIVE"),
           ("rebuild", "SHUTOFF", "SHUTOFF"), ("resize", "ACTIVE", "ACTIVE"),
           ("resize", "SHUTOFF", "SHUTOFF")]


@pytest.fixture
def host(tmp_path: Path) -> Host:
    return Host(tmp_path)


def active(host: Host, **extra: Any) -> dict[str, Any]:
    spec = host.spec(**extra)
    host.send(spec)
    host.settle()
    assert host.record(spec["uuid"])["state"] == "ACTIVE"
    return spec


def fake(host: Host, uuid: str) -> dict[str, Any] | None:
    path = Path(host.config["compute"]["state_dir"]) / "fake-instances" / f"{uuid}.json"
    return json.loads(path.read_text()) if path.exists() else None


def guest_log(host: Host, uuid: str) -> list[str]:
    path = Path(host.config["compute"]["state_dir"]) / "fake-instances" / "guests.log"
    if not path.exists():
        return []
    return [line.split()[1] for line in path.read_text().splitlines() if line.startswith(uuid)]


def params_for(host: Host, spec: dict[str, Any], action: str) -> dict[str, Any]:
    """What schedule.py puts in the request (and, for a resize, claims first)."""
    if action == "resize":
        claims.resize(host.placement, spec["uuid"], host.rp, NEW_SIZE)
        return {"resources": NEW_SIZE, "allocations": {host.rp: {"resources": NEW_SIZE}}}
    if action == "rebuild":
        return {"image": {"url": "file:///dev/zero", "sha256": None}}
    return {"hard": True} if action == "reboot" else {}


def ask(host: Host, spec: dict[str, Any], action: str, **params: Any) -> dict[str, Any]:
    """The operator's request, written as schedule.py writes it, and delivered."""
    entry = host.store.get(host.keys.spec(host.rp, spec["uuid"]))
    request = action_txn.new_request("ann@desk", **params)
    assert action_txn.request_action(host.store, entry, spec, records.read_record(
        host.store, host.rp, spec["uuid"]), action, request) is not None
    host.deliver(spec["uuid"])
    return request


def write_hostile(host: Host, spec: dict[str, Any], action: str, **params: Any) -> dict:
    """A request written straight to etcd, past schedule.py's checks and claim."""
    request = action_txn.new_request("mallory", **params)
    host.store.put(messages.INSTANCE_SPEC, host.keys.spec(host.rp, spec["uuid"]),
                   {**spec, "action": action, "request": request})
    host.deliver(spec["uuid"])
    return request


def last_event(host: Host, uuid: str) -> dict[str, Any]:
    return events.read(host.store, host.rp, uuid)[-1]


def to_state(host: Host, spec: dict[str, Any], state: str) -> None:
    if state == "SHUTOFF":
        ask(host, spec, "stop")
        host.settle()
    assert host.record(spec["uuid"])["state"] == state


# --------------------------------------------------------------- what is allowed works


@pytest.mark.parametrize(("action", "start", "end"), ALLOWED)
def test_an_allowed_action_is_done_and_recorded(host, action, start, end):
    spec = active(host)
    to_state(host, spec, start)
    request = ask(host, spec, action, **params_for(host, spec, action))
    record = host.record(spec["uuid"])
    assert record["state"] == PASSES[action]
    assert record["task"]["id"] == request["id"] and record["task"]["from"] == start
    host.settle()
    record = host.record(spec["uuid"])
    assert record["state"] == end and "task" not in record
    assert record["request_id"] == request["id"]
    event = last_event(host, spec["uuid"])
    assert (event["action"], event["result"], event["by"], event["request_id"]) == (
        action, "success", "ann@desk", request["id"])
    driven = fake(host, spec["uuid"])
    assert driven["running"] is (end == "ACTIVE")
    if action == "resize":
        assert driven["resources"] == record["resources"] == NEW_SIZE
        assert host.placement.get_usages(host.rp)["VCPU"] == 2
    if action == "rebuild":
        assert driven["image"] == record["image"] == "file:///dev/zero"


def test_the_fake_guests_log_follows_every_action(host):
    spec = active(host)
    for action in ("stop", "start", "reboot", "rebuild"):
        ask(host, spec, action, **params_for(host, spec, action))
        host.settle()
    assert guest_log(host, spec["uuid"]) == ["run", "halt", "run", "halt", "run", "halt", "run"]


def test_a_redelivered_request_is_done_once(host):
    spec = active(host)
    ask(host, spec, "reboot")
    host.deliver(spec["uuid"])  # again, while the job runs
    assert len(host.pool.pending) == 1
    host.settle()
    writes = len(host.store.committed)
    host.deliver(spec["uuid"])  # and after it ended
    host.settle()
    assert len(host.store.committed) == writes and not host.pool.pending


# ------------------------------------------------------------ what is not is refused


@pytest.mark.parametrize(("action", "state"), [
    ("start", "ACTIVE"), ("stop", "SHUTOFF"), ("reboot", "SHUTOFF"),
    ("build", "SHUTOFF")])
def test_a_request_its_state_does_not_allow_is_refused_by_the_host(host, action, state):
    spec = active(host)
    to_state(host, spec, state)
    before = fake(host, spec["uuid"])
    request = write_hostile(host, spec, action)
    host.settle()
    record = host.record(spec["uuid"])
    assert record["state"] == state and fake(host, spec["uuid"]) == before
    if action != "build":  # a build spec of a built instance is simply done
        assert record["request_id"] == request["id"]
        event = last_event(host, spec["uuid"])
        assert (event["result"], event["by"]) == ("refused", "mallory")
        assert f"is {state}: {action} is not allowed now" in event["error"]


def test_a_resize_without_its_claim_is_refused_and_changes_nothing(host):
    spec = active(host)
    # Straight to etcd, no claim: the host would give away capacity nobody claimed.
    write_hostile(host, spec, "resize", resources={"VCPU": 8, "MEMORY_MB": 4096,
                                                   "DISK_GB": 1},
                  allocations={host.rp: {"resources": {"VCPU": 8, "MEMORY_MB": 4096,
                                                       "DISK_GB": 1}}})
    host.settle()
    assert host.record(spec["uuid"])["state"] == "ACTIVE"
    assert host.record(spec["uuid"])["resources"] == spec["resources"]
    assert fake(host, spec["uuid"])["resources"] == spec["resources"]
    event = last_event(host, spec["uuid"])
    assert event["result"] == "refused" and "Placement holds DISK_GB:1,MEMORY_MB:64,VCPU:1" in \
        event["error"]
    assert host.placement.get_usages(host.rp)["VCPU"] == 1


def test_a_resize_naming_another_host_is_refused(host):
    spec = active(host)
    other = "11111111-2222-4333-8444-555555555555"
    write_hostile(host, spec, "resize", resources=NEW_SIZE,
                  allocations={other: {"resources": NEW_SIZE}})
    host.settle()
    assert "claimed on this host only" in last_event(host, spec["uuid"])["error"]


def test_an_action_for_an_instance_this_host_does_not_hold_is_dropped(host):
    spec = host.spec()  # never sent: no record here
    host.store.put(messages.INSTANCE_SPEC, host.keys.spec(host.rp, spec["uuid"]),
                   {**spec, "action": "stop", "request": action_txn.new_request("x")})
    host.deliver(spec["uuid"])
    assert host.keys_of(spec["uuid"]) == [] and not host.pool.pending


def test_a_request_written_during_an_action_waits_for_it(host):
    """Past schedule.py (which refuses it): a stop written while a reboot runs is looked at
    when the reboot has ended, and done then."""
    spec = active(host)
    ask(host, spec, "reboot")
    write_hostile(host, spec, "stop")
    assert [job.kind for job in host.machine.jobs.values()] == ["reboot"]
    host.settle()
    assert host.record(spec["uuid"])["state"] == "SHUTOFF"
    assert [e["action"] for e in events.read(host.store, host.rp, spec["uuid"])][-2:] == [
        "reboot", "stop"]


# ------------------------------------------------------------- destroy, at any moment


@pytest.mark.parametrize(("action", "start", "_end"), ALLOWED)
def test_destroy_during_an_action_ends_deleted_with_nothing_left(host, action, start, _end):
    spec = active(host)
    to_state(host, spec, start)
    ask(host, spec, action, **params_for(host, spec, action))
    assert host.pool.pending  # the action's job has not run
    host.destroy(spec)
    host.settle()
    assert host.record(spec["uuid"])["state"] == "DELETED"
    assert host.placement.get_allocations(spec["uuid"])["allocations"] == {}
    assert fake(host, spec["uuid"]) is None and host.driver_holds() == set()
    log = events.read(host.store, host.rp, spec["uuid"])
    assert [(e["action"], e["result"]) for e in log[-2:]] == [(action, "error"),
                                                              ("destroy", "success")]


# ------------------------------------------------------ failures leave it as it was


def test_a_failed_resize_keeps_the_old_size_and_puts_the_claim_back(tmp_path):
    host = Host(tmp_path, fail_actions=["resize"])
    spec = active(host)
    ask(host, spec, "resize", **params_for(host, spec, "resize"))
    assert host.placement.get_usages(host.rp)["VCPU"] == 2  # claimed by schedule.py
    host.settle()
    record = host.record(spec["uuid"])
    assert (record["state"], record["resources"]) == ("ACTIVE", spec["resources"])
    assert host.placement.get_allocations(spec["uuid"])["allocations"] == spec["allocations"]
    now, _ = host.store.read(messages.INSTANCE_SPEC, host.keys.spec(host.rp, spec["uuid"]))
    assert now["resources"] == spec["resources"]
    assert fake(host, spec["uuid"])["resources"] == spec["resources"]
    event = last_event(host, spec["uuid"])
    assert event["result"] == "error" and "cannot resize" in event["error"]


def test_a_failed_held_resize_puts_the_claim_back_and_frees_the_hold(tmp_path):
    host = Host(tmp_path, fail_actions=["resize"])
    spec = active(host)
    hold = "0b5d6c43-43f6-4c1e-9f8b-6c5a8a6f2a11"
    old, _ = claims.resize_holding(host.placement, spec["uuid"], host.rp, NEW_SIZE, hold)
    ask(host, spec, "resize", resources=NEW_SIZE,
        allocations={host.rp: {"resources": NEW_SIZE}},
        hold={"consumer": hold, "allocations": old, "resources": spec["resources"]})
    host.settle()
    record = host.record(spec["uuid"])
    assert (record["state"], record["resources"]) == ("ACTIVE", spec["resources"])
    assert "resize_hold" not in record
    assert host.placement.get_allocations(spec["uuid"])["allocations"] == spec["allocations"]
    assert hold not in host.placement.consumers


def test_a_rebuild_gives_the_guest_the_user_data_and_key_asked(host):
    spec = active(host)
    ask(host, spec, "rebuild", image={"url": "file:///dev/zero", "sha256": None},
        user_data="#cloud-config\n", ssh_key="ssh-ed25519 AAAA new")
    host.settle()
    now, _ = host.store.read(messages.INSTANCE_SPEC, host.keys.spec(host.rp, spec["uuid"]))
    assert (now["user_data"], now["ssh_key"]) == ("#cloud-config\n", "ssh-ed25519 AAAA new")
    guest = fake(host, spec["uuid"])
    assert (guest["user_data"], guest["ssh_key"]) == ("#cloud-config\n", "ssh-ed25519 AAAA new")
    assert host.record(spec["uuid"])["state"] == "ACTIVE"


def test_a_rebuild_with_a_missing_image_leaves_the_guest_running(host):
    spec = active(host)
    ask(host, spec, "rebuild", image={"url": "file:///no/such/image", "sha256": None})
    host.settle()
    record = host.record(spec["uuid"])
    assert (record["state"], record["image"]) == ("ACTIVE", spec["image"]["url"])
    assert guest_log(host, spec["uuid"]) == ["run"]  # never halted
    assert "not found" in last_event(host, spec["uuid"])["error"]


def test_an_action_that_times_out_ends_in_error_and_the_guest_stays(host):
    spec = active(host)
    ask(host, spec, "stop")
    host.pool.fail_next(concurrent.futures.TimeoutError())
    host.settle()
    assert host.record(spec["uuid"])["state"] == "ACTIVE"
    assert "timed out" in last_event(host, spec["uuid"])["error"]
    assert fake(host, spec["uuid"]) is not None


def test_a_bug_recording_an_action_ends_it_in_error_without_destroying_the_guest(
        host, monkeypatch):
    spec = active(host)
    ask(host, spec, "reboot")
    real = action_txn.end_action
    calls = []

    def broken(*args, **kwargs):
        calls.append(kwargs)
        if len(calls) == 1:
            raise RuntimeError("bug")
        return real(*args, **kwargs)

    monkeypatch.setattr(action_txn, "end_action", broken)
    host.settle()
    assert host.record(spec["uuid"])["state"] == "ACTIVE"
    assert "internal error recording the reboot" in last_event(host, spec["uuid"])["error"]
    assert fake(host, spec["uuid"]) is not None and host.placement.get_usages(host.rp)["VCPU"]


# ----------------------------------------------------------------- restarts, fences


def test_an_action_cut_short_by_a_restart_is_resumed(host):
    spec = active(host)
    ask(host, spec, "stop")
    host.machine.jobs.clear()  # the daemon died with the stop in flight
    host.pool.pending.clear()
    writes = len(host.store.committed)
    host.deliver(spec["uuid"])  # the next start's reconcile
    assert len(host.store.committed) == writes
    assert host.machine.jobs[spec["uuid"]].kind == STOP
    host.settle()
    assert host.record(spec["uuid"])["state"] == "SHUTOFF"
    assert [e["result"] for e in events.read(host.store, host.rp, spec["uuid"])] == [
        "success", "success"]


def test_a_stopped_instance_is_built_stopped_and_drained_stopped(host):
    spec = host.spec(stopped=True)
    host.send(spec)
    host.settle()
    assert host.record(spec["uuid"])["state"] == "SHUTOFF"
    assert fake(host, spec["uuid"])["running"] is False
    assert guest_log(host, spec["uuid"]) == []  # it never ran
    # A drain takes it away (evacuate) and says it is to be built stopped elsewhere.
    entry = host.store.get(host.keys.spec(host.rp, spec["uuid"]))
    current, _ = host.store.read(messages.INSTANCE_SPEC, entry.key)
    host.store.put(messages.CONTROLLER_LEADER, host.keys.leader(), {"name": "c", "since": 1.0})
    assert action_txn.request_evacuate(host.store, entry, current, "ann@desk")
    host.deliver(spec["uuid"])
    host.settle()
    assert host.record(spec["uuid"])["state"] == "RESCHEDULING"
    handed, _ = host.store.read(messages.INSTANCE_SPEC, entry.key)
    assert handed["stopped"] is True


def test_a_drained_active_instance_that_was_stopped_is_handed_over_stopped(host):
    spec = active(host)
    to_state(host, spec, "SHUTOFF")
    entry = host.store.get(host.keys.spec(host.rp, spec["uuid"]))
    current, _ = host.store.read(messages.INSTANCE_SPEC, entry.key)
    assert action_txn.request_evacuate(host.store, entry, current, "ann@desk")
    host.deliver(spec["uuid"])
    host.settle()
    handed, _ = host.store.read(messages.INSTANCE_SPEC, entry.key)
    assert host.record(spec["uuid"])["state"] == "RESCHEDULING" and handed["stopped"] is True
    assert last_event(host, spec["uuid"])["action"] == "evacuate"


# ----------------------------------------------------------------- the claim, checked first


def test_an_action_on_an_instance_whose_claim_is_gone_is_refused_and_changes_nothing(host):
    spec = active(host)
    host.placement.delete_allocations(spec["uuid"])  # freed behind the host's back
    ask(host, spec, "reboot", hard=True)
    host.settle()
    assert host.record(spec["uuid"])["state"] == "ACTIVE"
    event = last_event(host, spec["uuid"])
    assert (event["result"], event["error"]) == (
        "refused", "Placement holds no claim for this instance")
    assert guest_log(host, spec["uuid"]) == ["run"]  # never rebooted


def test_an_action_whose_claim_is_split_with_another_host_is_refused(host):
    spec = active(host)
    other = "11111111-2222-4333-8444-555555555555"
    host.placement.ensure_provider(other, "host-b")
    host.placement.set_inventory(other, {"MEMORY_MB": {"total": 4096}})
    generation = host.placement.get_allocations(spec["uuid"])["consumer_generation"]
    host.placement.claim(spec["uuid"], {host.rp: {"resources": {"VCPU": 1, "DISK_GB": 1}},
                                        other: {"resources": {"MEMORY_MB": 64}}}, "p", "u",
                         consumer_generation=generation)
    ask(host, spec, "rebuild", image={"url": "file:///dev/zero", "sha256": None})
    host.settle()
    assert "split between this host" in last_event(host, spec["uuid"])["error"]
    assert fake(host, spec["uuid"])["image"] == spec["image"]["url"]  # no new disk


def test_an_action_resumed_after_a_restart_without_its_claim_ends_in_error_unrun(host):
    spec = active(host)
    ask(host, spec, "stop")
    host.machine.jobs.clear()  # the daemon died with the stop in flight
    host.pool.pending.clear()
    host.placement.delete_allocations(spec["uuid"])  # freed while it was down
    host.deliver(spec["uuid"])  # the next start's reconcile
    host.settle()
    assert host.record(spec["uuid"])["state"] == "ACTIVE"  # where it started, not run
    event = last_event(host, spec["uuid"])
    assert (event["action"], event["result"]) == ("stop", "error")
    assert event["error"] == "refused: Placement holds no claim for this instance"
    assert guest_log(host, spec["uuid"]) == ["run"]

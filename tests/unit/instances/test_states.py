"""The states' table: transitions allowed and refused, the operator's actions allowed and
refused in every state, and whether an instance built again should be powered off."""

from __future__ import annotations

import pytest

from etcd_compute.instances import states
from tests.unit.instances.helpers import ACTIONS, ALLOWED_ACTIONS, STATES

ALLOWED = [(None, s) for s in ("SCHEDULED", "BUILDING", "ERROR", "DELETING", "DELETED")] + [
    ("SCHEDULED", "BUILDING"), ("BUILDING", "ACTIVE"), ("BUILDING", "RESCHEDULING"),
    ("BUILDING", "ERROR"), ("ACTIVE", "DELETING"), ("ACTIVE", "ERROR"), ("ERROR", "DELETING"),
    ("RESCHEDULING", "SCHEDULED"), ("RESCHEDULING", "ERROR"), ("RESCHEDULING", "DELETING"),
    # evacuated: its host died
    ("SCHEDULED", "SCHEDULED"), ("BUILDING", "SCHEDULED"), ("ACTIVE", "SCHEDULED"),
    ("DELETING", "DELETED"), ("DELETED", "DELETED"),
]


REFUSED = [(None, "ACTIVE"), ("SCHEDULED", "ACTIVE"), ("ERROR", "SCHEDULED"),
           ("ACTIVE", "BUILDING"), ("DELETING", "SCHEDULED"), ("ERROR", "ACTIVE"),
           ("DELETED", "SCHEDULED"), ("ERROR", "RESCHEDULING"), ("RESCHEDULING", "ACTIVE"),
           ("DELETING", "ACTIVE"), ("DELETED", "BUILDING"), ("DELETED", "ERROR")]


@pytest.mark.parametrize(("current", "target"), ALLOWED)
def test_allowed_transitions(current, target):
    states.check_transition(current, target)


@pytest.mark.parametrize(("current", "target"), REFUSED)
def test_refused_transitions_name_both_states(current, target):
    with pytest.raises(states.InvalidTransition) as caught:
        states.check_transition(current, target)
    assert target in str(caught.value) and (current or "no record") in str(caught.value)


def test_every_state_has_its_moves_listed():
    assert set(states.TRANSITIONS) == {None, *states.STATES}
    assert all(targets <= set(states.STATES) for targets in states.TRANSITIONS.values())





@pytest.mark.parametrize("state", STATES)
@pytest.mark.parametrize("action", ACTIONS)
def test_every_action_in_every_state_is_allowed_or_refused_naming_both(action, state):
    if (action, state) in ALLOWED_ACTIONS:
        states.check_action(state, action)
        assert action in states.allowed_actions(state)
        return
    with pytest.raises(states.ActionRefused) as refused:
        states.check_action(state, action, "u-1")
    message = str(refused.value)
    assert message.startswith(f"instance u-1 is {state or 'without a record'}: {action} is "
                              "not allowed now (allowed: ")
    allowed = message.split("(allowed: ")[1].rstrip(")").split(", ")
    assert allowed == states.allowed_actions(state) and allowed[-1] == "destroy"
    assert action not in allowed


@pytest.mark.parametrize("state", STATES)
def test_destroy_is_allowed_in_every_state(state):
    states.check_action(state, "destroy")


@pytest.mark.parametrize("transient", sorted(states.TRANSIENT))
def test_an_action_in_progress_ends_as_it_may_and_goes_nowhere_else(transient):
    for target in ("ACTIVE", "SHUTOFF", "DELETING", "DELETED", "ERROR", "SCHEDULED"):
        states.check_transition(transient, target)
    for target in ("BUILDING", "RESCHEDULING", *states.TRANSIENT):
        with pytest.raises(states.InvalidTransition):
            states.check_transition(transient, target)


def test_power_changes_and_builds_powered_off_are_transitions():
    for current, target in [("ACTIVE", "SHUTOFF"), ("SHUTOFF", "ACTIVE"),
                            ("BUILDING", "SHUTOFF"), ("SHUTOFF", "SCHEDULED"),
                            ("SHUTOFF", "RESCHEDULING")]:
        states.check_transition(current, target)
    for current, target in [("SCHEDULED", "SHUTOFF"), ("ERROR", "SHUTOFF"),
                            ("DELETED", "SHUTOFF"), ("SHUTOFF", "BUILDING")]:
        with pytest.raises(states.InvalidTransition):
            states.check_transition(current, target)


@pytest.mark.parametrize(("state", "action", "start", "stopped"), [
    ("ACTIVE", None, None, False), ("SHUTOFF", None, None, True),
    ("STOPPING", "stop", "ACTIVE", True), ("STARTING", "start", "SHUTOFF", False),
    ("RESIZING", "resize", "SHUTOFF", True), ("REBUILDING", "rebuild", "ACTIVE", False),
    ("REBOOTING", "reboot", "ACTIVE", False)])
def test_wants_stopped_follows_the_state_and_the_action_under_way(state, action, start,
                                                                 stopped):
    record = {"state": state}
    if action:
        record["task"] = {"action": action, "from": start}
    assert states.wants_stopped(record, {}) is stopped


def test_a_build_keeps_its_specs_wish():
    for state in ("SCHEDULED", "BUILDING", "RESCHEDULING"):
        assert states.wants_stopped({"state": state}, {"stopped": True})
        assert not states.wants_stopped({"state": state}, {})

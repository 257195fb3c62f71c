"""The states' table: every one of the 650 moves allowed or refused as
docs/reference/instance-states.md documents it, the operator's actions allowed and refused
in every state, and whether an instance built again should be powered off."""

from __future__ import annotations

import pytest

from etcd_compute.instances import states
from tests.support import REPO
from tests.unit.instances.helpers import ACTIONS, ALLOWED_ACTIONS, STATES

# The documented machine (docs/reference/instance-states.md), written down here on its own: a row
# is where an instance is (none: no record yet, or an unreadable one), a column where it
# may go. Not derived from `TRANSITIONS`: a test that read its expectation from the code
# under test could not fail.
MACHINE = """
             SCH BLD ACT OFF STP STA SUS SSP RSM PSD PSG UPS RBT RBD RSZ SNP FLT PLG MGR MGD INC RSC ERR DLG DEL
none           +   +   .   .   .   .   .   .   .   .   .   .   .   .   .   .   .   .   .   .   +   .   +   +   +
SCHEDULED      +   +   .   .   .   .   .   .   .   .   .   .   .   .   .   .   .   .   .   .   .   +   +   +   +
BUILDING       +   .   +   +   .   .   .   .   .   .   .   .   .   .   .   .   .   .   .   .   .   +   +   +   +
ACTIVE         +   .   .   +   +   .   .   +   .   .   +   .   +   +   +   +   +   +   +   .   .   +   +   +   +
SHUTOFF        +   .   +   .   .   +   .   .   .   .   .   .   .   +   +   +   +   +   +   .   .   +   +   +   +
STOPPING       +   .   +   +   .   .   .   .   .   .   .   .   .   .   .   .   .   .   .   .   .   .   +   +   +
STARTING       +   .   +   +   .   .   .   .   .   .   .   .   .   .   .   .   .   .   .   .   .   .   +   +   +
SUSPENDED      +   .   .   .   .   .   .   .   +   .   .   .   .   .   .   +   .   .   .   .   .   +   +   +   +
SUSPENDING     +   .   +   .   .   .   +   .   .   .   .   .   .   .   .   .   .   .   .   .   .   .   +   +   +
RESUMING       +   .   +   .   .   .   +   .   .   .   .   .   .   .   .   .   .   .   .   .   .   .   +   +   +
PAUSED         +   .   .   +   .   .   .   .   .   .   .   +   +   .   .   +   .   .   .   .   .   +   +   +   +
PAUSING        +   .   +   .   .   .   .   .   .   +   .   .   .   .   .   .   .   .   .   .   .   .   +   +   +
UNPAUSING      +   .   +   .   .   .   .   .   .   +   .   .   .   .   .   .   .   .   .   .   .   .   +   +   +
REBOOTING      +   .   +   .   .   .   .   .   .   +   .   .   .   .   .   .   .   .   .   .   .   .   +   +   +
REBUILDING     +   .   +   +   .   .   .   .   .   .   .   .   .   .   .   .   .   .   .   .   .   .   +   +   +
RESIZING       +   .   +   +   .   .   .   .   .   .   .   .   .   .   .   .   .   .   .   .   .   .   +   +   +
SNAPSHOTTING   +   .   +   +   .   .   +   .   .   +   .   .   .   .   .   .   .   .   .   .   .   .   +   +   +
FILTERING      +   .   +   +   .   .   .   .   .   .   .   .   .   .   .   .   .   .   .   .   .   .   +   +   +
PLUGGING       +   .   +   +   .   .   .   .   .   .   .   .   .   .   .   .   .   .   .   .   .   .   +   +   +
MIGRATING      +   .   +   +   .   .   .   .   .   .   .   .   .   .   .   .   .   .   .   +   .   .   +   +   +
MIGRATED       +   .   .   +   .   .   .   .   .   .   .   .   .   .   .   .   .   .   .   .   .   .   +   +   +
INCOMING       .   .   +   +   .   .   .   .   .   .   .   .   .   .   .   .   .   .   .   .   +   .   +   +   +
RESCHEDULING   +   .   .   .   .   .   .   .   .   .   .   .   .   .   .   .   .   .   .   .   .   .   +   +   +
ERROR          .   .   .   .   .   .   .   .   .   .   .   .   .   .   .   .   .   .   .   .   .   .   +   +   +
DELETING       .   .   .   .   .   .   .   .   .   .   .   .   .   .   .   .   .   .   .   .   .   .   +   .   +
DELETED        .   .   .   .   .   .   .   .   .   .   .   .   .   .   .   .   .   .   .   .   .   .   .   .   +
"""  # noqa: E501 (a row per state, a column per state)
COLUMNS = {"SCH": "SCHEDULED", "BLD": "BUILDING", "ACT": "ACTIVE", "OFF": "SHUTOFF",
           "STP": "STOPPING", "STA": "STARTING", "SUS": "SUSPENDED", "SSP": "SUSPENDING",
           "RSM": "RESUMING", "PSD": "PAUSED", "PSG": "PAUSING", "UPS": "UNPAUSING",
           "RBT": "REBOOTING", "RBD": "REBUILDING",
           "RSZ": "RESIZING", "SNP": "SNAPSHOTTING", "FLT": "FILTERING", "PLG": "PLUGGING",
           "MGR": "MIGRATING", "MGD": "MIGRATED",
           "INC": "INCOMING", "RSC": "RESCHEDULING", "ERR": "ERROR", "DLG": "DELETING",
           "DEL": "DELETED"}


def parse(grid: str) -> dict[tuple[str | None, str], bool]:
    """{(from, to): allowed} from a grid like MACHINE."""
    header, *rows = [line.split() for line in grid.strip().splitlines()]
    columns = [COLUMNS[name] for name in header]
    moves = {}
    for name, *marks in rows:
        assert len(marks) == len(columns) and set(marks) <= {"+", "."}, name
        for target, mark in zip(columns, marks, strict=True):
            moves[(None if name == "none" else name, target)] = mark == "+"
    return moves


DOCUMENTED = parse(MACHINE)
STATES_PAGE = "docs/reference/instance-states.md"


def test_the_documented_machine_names_every_pair_once():
    assert len(DOCUMENTED) == 26 * 25 == 650
    assert {source for source, _ in DOCUMENTED} == {None, *states.STATES}
    assert {target for _, target in DOCUMENTED} == set(states.STATES)


def test_the_states_page_shows_this_machine():
    page = (REPO / STATES_PAGE).read_text()
    grid = page[page.index("              SCH BLD"):]
    assert parse(grid[:grid.index("```")]) == DOCUMENTED


@pytest.mark.parametrize(("current", "target"), sorted(DOCUMENTED, key=str))
def test_every_move_is_allowed_or_refused_as_documented(current, target):
    if DOCUMENTED[(current, target)]:
        states.check_transition(current, target)
        return
    with pytest.raises(states.InvalidTransition) as caught:
        states.check_transition(current, target)
    assert str(caught.value) == \
        f"instance cannot go from {current or 'no record'} to {target}"


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


@pytest.mark.parametrize(("state", "action", "start", "stopped"), [
    ("ACTIVE", None, None, False), ("SHUTOFF", None, None, True),
    ("STOPPING", "stop", "ACTIVE", True), ("STARTING", "start", "SHUTOFF", False),
    ("RESIZING", "resize", "SHUTOFF", True), ("REBUILDING", "rebuild", "ACTIVE", False),
    ("REBOOTING", "reboot", "ACTIVE", False), ("SNAPSHOTTING", "snapshot", "SHUTOFF", True),
    ("MIGRATING", "migrate", "SHUTOFF", True), ("MIGRATING", "migrate", "ACTIVE", False),
    # A suspended guest's memory is lost with its host: built again, it is powered off.
    ("SUSPENDED", None, None, True), ("SUSPENDING", "suspend", "ACTIVE", True),
    ("RESUMING", "resume", "SUSPENDED", False),
    ("SNAPSHOTTING", "snapshot", "SUSPENDED", True),
    # A paused guest's memory is lost with its host too; built again, it runs (Nova's
    # evacuate of a paused server ends ACTIVE).
    ("PAUSED", None, None, False), ("PAUSING", "pause", "ACTIVE", False),
    ("UNPAUSING", "unpause", "PAUSED", False), ("SNAPSHOTTING", "snapshot", "PAUSED", False),
    ("REBOOTING", "reboot", "PAUSED", False)])
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

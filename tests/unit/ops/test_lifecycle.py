"""The operator's lifecycle actions (ops/lifecycle.py) over FakeStore and FakePlacement:
allowed ones write the host's spec (a resize claims first), refused ones write nothing and
claim nothing, a resize that loses a race puts back only its own claim."""

from __future__ import annotations

import pytest

from etcd_compute import claims, events, messages
from etcd_compute.errors import EtcdUnavailable, NotFound, UsageError
from etcd_compute.etcd import Compare, Put
from etcd_compute.instances import actions as action_txn
from etcd_compute.instances import records, states
from etcd_compute.ops import lifecycle
from etcd_compute.ops.operations import WaitTimeout
from tests.unit.fakes import FakePlacement, FakeStore
from tests.unit.ops.test_operations import RP, UNKNOWN, alive, scheduled, set_state

NEW = {"VCPU": 2, "MEMORY_MB": 128, "DISK_GB": 1}
ALLOWED = {("stop", "ACTIVE"), ("start", "SHUTOFF"), ("suspend", "ACTIVE"),
           ("resume", "SUSPENDED"), ("pause", "ACTIVE"), ("unpause", "PAUSED"),
           ("reboot", "ACTIVE"), ("reboot", "PAUSED"), ("snapshot", "PAUSED"),
           ("rebuild", "ACTIVE"), ("rebuild", "SHUTOFF"), ("resize", "ACTIVE"),
           ("resize", "SHUTOFF"), ("snapshot", "ACTIVE"), ("snapshot", "SHUTOFF"),
           ("snapshot", "SUSPENDED"), ("security-groups", "ACTIVE"),
           ("security-groups", "SHUTOFF"), ("attach-interface", "ACTIVE"),
           ("attach-interface", "SHUTOFF"), ("detach-interface", "ACTIVE"),
           ("detach-interface", "SHUTOFF")}
NIC = {"uuid": "6f1c0f6e-3b0a-4c1e-9d1e-2f8f3c6a9a02"}


def room(placement: FakePlacement, vcpu: int = 4) -> None:
    placement.ensure_provider(RP, "host-a")
    placement.set_inventory(RP, {"VCPU": {"total": vcpu}, "MEMORY_MB": {"total": 4096},
                                 "DISK_GB": {"total": 100}})


SNAPSHOT = {"image_id": "6f1c1a52-3d4e-4c3b-9a55-2b0c6d8e9f10", "name": "snap1"}


def instance(state: str = "ACTIVE", **extra) -> tuple[FakeStore, FakePlacement, dict]:
    store, placement = FakeStore(), FakePlacement()
    room(placement)
    spec = scheduled(store, **extra)
    placement.claim(spec["uuid"], spec["allocations"], "p", "u")
    set_state(store, spec["uuid"], state)
    placement.calls.clear()
    return store, placement, spec


def spec_now(store: FakeStore, spec: dict) -> dict:
    return store.read(messages.INSTANCE_SPEC, store.keys.spec(RP, spec["uuid"]))[0]


def request(store, placement, spec, action, **params) -> lifecycle.Requested:
    if action == "resize":
        params.setdefault("resources", NEW)
    if action == "snapshot":
        params.setdefault("image_for", lambda spec: SNAPSHOT)
    if action == "security-groups":
        params.setdefault("asked", lifecycle.Asked(security_groups=[]))
    if action in ("attach-interface", "detach-interface"):
        params.setdefault("asked", lifecycle.Asked(nic=NIC))
    return lifecycle.request(store, placement, spec["uuid"], action, **params)


@pytest.mark.parametrize(("action", "state"), sorted(ALLOWED))
def test_an_allowed_action_is_written_into_the_hosts_spec(action, state):
    store, placement, spec = instance(state)
    before = store.revision
    asked = request(store, placement, spec, action)
    assert store.revision == before + 1  # one write: the spec
    written = spec_now(store, spec)
    assert written["action"] == action and written["request"] == asked.request
    assert asked.request["by"] and asked.host == RP
    assert records.read_record(store, RP, spec["uuid"]).state == state
    if action == "resize":
        assert asked.request["resources"] == NEW
        assert placement.get_allocations(spec["uuid"])["allocations"] == {
            RP: {"resources": NEW}}
    else:
        assert placement.calls == []
    if action == "snapshot":
        assert asked.request["snapshot"] == SNAPSHOT
    if action == "security-groups":
        assert asked.request["security_groups"] == []
    if action in ("attach-interface", "detach-interface"):
        assert asked.request["nic"] == NIC


@pytest.mark.parametrize(("action", "state"), [
    (a, s) for a in lifecycle.ACTIONS for s in states.STATES if (a, s) not in ALLOWED])
def test_an_action_its_state_does_not_allow_writes_and_claims_nothing(action, state):
    store, placement, spec = instance(state)
    before = store.revision
    with pytest.raises(states.ActionRefused) as refused:
        request(store, placement, spec, action)
    assert f"is {state}: {action} is not allowed now (allowed: " in str(refused.value)
    assert store.revision == before and placement.calls == []


def test_a_move_is_not_asked_here():
    store, placement, spec = instance()
    with pytest.raises(UsageError, match="migrate: not a lifecycle action"):
        request(store, placement, spec, "migrate")


def test_an_action_on_a_host_that_is_down_is_refused_before_anything_is_written():
    store, placement, spec = instance()
    store.delete(store.keys.alive(RP))
    before = store.revision
    with pytest.raises(states.ActionRefused, match="its host host-a is down"):
        request(store, placement, spec, "resize")
    assert store.revision == before and placement.calls == []


def test_unknown_and_malformed_instances():
    store, placement = FakeStore(), FakePlacement()
    with pytest.raises(NotFound, match=f"no instance {UNKNOWN}"):
        lifecycle.request(store, placement, UNKNOWN, "stop")
    with pytest.raises(UsageError, match="is not an instance uuid"):
        lifecycle.request(store, placement, "web-1", "stop")


def test_an_instance_without_a_readable_spec_is_refused():
    store, placement, spec = instance()
    store.put_raw(store.keys.spec(RP, spec["uuid"]), "{garbage")
    with pytest.raises(states.ActionRefused, match="no readable spec"):
        request(store, placement, spec, "stop")


# ------------------------------------------------------------------------ resize


def test_a_resize_that_does_not_fit_is_refused_with_nothing_changed():
    store, placement, spec = instance()
    before = store.revision
    with pytest.raises(lifecycle.NoRoom, match="no room for it on its host host-a"):
        request(store, placement, spec, "resize", resources={**NEW, "VCPU": 5})
    assert store.revision == before
    assert placement.get_allocations(spec["uuid"])["allocations"] == spec["allocations"]


@pytest.mark.parametrize(("resources", "fault"), [
    ({"VCPU": 1, "MEMORY_MB": 64, "DISK_GB": 1}, "has DISK_GB:1,MEMORY_MB:64,VCPU:1 already"),
    ({"VCPU": 2, "MEMORY_MB": 64, "DISK_GB": 0}, "a disk cannot shrink"),
])
def test_a_resize_to_the_same_size_or_a_smaller_disk_is_a_usage_error(resources, fault):
    store, placement, spec = instance()
    with pytest.raises(UsageError, match=fault):
        request(store, placement, spec, "resize", resources=resources)
    assert placement.calls == []


def test_a_resize_that_loses_the_etcd_race_puts_its_claim_back(monkeypatch):
    store, placement, spec = instance()
    monkeypatch.setattr(action_txn, "request_action", lambda *args, **kwargs: None)
    with pytest.raises(UsageError, match="kept changing"):
        request(store, placement, spec, "resize")
    assert placement.get_allocations(spec["uuid"])["allocations"] == spec["allocations"]
    assert spec_now(store, spec)["action"] == "build"


def test_an_action_is_refused_while_another_request_is_pending():
    store, placement, spec = instance()
    request(store, placement, spec, "resize", resources=NEW)  # its host has not taken it up
    before = store.revision
    for action in ("resize", "reboot", "stop"):
        with pytest.raises(states.ActionRefused, match="a resize asked by .* is pending"):
            request(store, placement, spec, action, resources={**NEW, "VCPU": 3})
    assert store.revision == before
    assert placement.get_allocations(spec["uuid"])["allocations"] == {RP: {"resources": NEW}}


@pytest.mark.parametrize("pending", ["destroy", "evacuate"])
def test_an_action_never_overwrites_a_pending_destroy_or_evacuate(pending):
    store, placement, spec = instance()
    entry = store.get(store.keys.spec(RP, spec["uuid"]))
    getattr(action_txn, f"request_{pending}")(store, entry, spec, "bob")
    with pytest.raises(states.ActionRefused, match=f"a {pending} asked by bob is pending"):
        request(store, placement, spec, "stop")
    assert spec_now(store, spec)["action"] == pending


def test_two_resizes_racing_end_with_one_claim_and_the_spec_that_says_so(monkeypatch):
    """A claims, then B claims and writes its spec before A writes: A's write fails and
    its undo sees B's claim after its own, so it leaves it. Claim and spec agree on B."""
    store, placement, spec = instance()
    real_write = action_txn.request_action
    b_size = {**NEW, "VCPU": 3}
    b_done: list[lifecycle.Requested] = []

    def a_writes_last(*args, **kwargs):
        if not b_done:
            monkeypatch.setattr(action_txn, "request_action", real_write)
            b_done.append(request(store, placement, spec, "resize", resources=b_size))
            monkeypatch.setattr(action_txn, "request_action", a_writes_last)
        return real_write(*args, **kwargs)

    monkeypatch.setattr(action_txn, "request_action", a_writes_last)
    with pytest.raises(states.ActionRefused, match="a resize asked by .* is pending"):
        request(store, placement, spec, "resize", resources=NEW)  # A
    assert spec_now(store, spec)["request"] == b_done[0].request
    assert placement.get_allocations(spec["uuid"])["allocations"] == {
        RP: {"resources": b_size}}


def test_a_claim_left_at_another_size_is_resized_from_what_it_holds():
    """A resize that died between its claim and its write left the claim at its size: the
    next resize replaces whatever is held on the host (generation checked)."""
    store, placement, spec = instance()
    placement.consumers[spec["uuid"]]["allocations"] = {RP: {"resources": NEW}}
    asked = request(store, placement, spec, "resize", resources={**NEW, "VCPU": 3})
    assert placement.get_allocations(spec["uuid"])["allocations"] == {
        RP: {"resources": asked.request["resources"]}}


def test_a_claim_that_is_not_on_its_host_is_refused():
    store, placement, spec = instance()
    placement.consumers[spec["uuid"]]["allocations"] = {}
    with pytest.raises(states.ActionRefused, match="is not on its host"):
        request(store, placement, spec, "resize")


def test_an_undo_never_takes_back_a_claim_someone_wrote_after_ours():
    _store, placement, spec = instance()
    held, generation = claims.resize(placement, spec["uuid"], RP, NEW)
    later = {**NEW, "VCPU": 3}
    claims.resize(placement, spec["uuid"], RP, later)  # another resize after ours
    assert claims.undo(placement, spec["uuid"], held, generation) is False
    assert placement.get_allocations(spec["uuid"])["allocations"] == {
        RP: {"resources": later}}
    held, generation = claims.resize(placement, spec["uuid"], RP, NEW)
    assert claims.undo(placement, spec["uuid"], held, generation) is True
    assert placement.get_allocations(spec["uuid"])["allocations"] == {
        RP: {"resources": later}}


@pytest.mark.parametrize("query", [
    "resources=VCPU:2,MEMORY_MB:128,DISK_GB:1&in_tree=11111111-2222-4333-8444-555555555555",
    "resources=VCPU:2,MEMORY_MB:128,DISK_GB:1&required=CUSTOM_OTHER_HOST",
    "resources=VCPU:2,MEMORY_MB:128,DISK_GB:1&member_of=11111111-2222-4333-8444-555555555555",
    "resources1=VCPU:2&resources=MEMORY_MB:128,DISK_GB:1",
    "resources=VCPU:2,MEMORY_MB:128,DISK_GB:1&limit=1",
    "resources=VCPU:2,MEMORY_MB:128,DISK_GB:1&group_policy=isolate",
])
def test_a_resize_query_that_would_pick_a_host_is_a_usage_error(query):
    with pytest.raises(UsageError, match="resources=... only"):
        lifecycle.resize_request(query)


@pytest.mark.parametrize(("query", "fault"), [
    ("resources=VCPU:2147483648,MEMORY_MB:1,DISK_GB:1", "out of range"),
    ("resources=VCPU:0,MEMORY_MB:1,DISK_GB:1", "out of range"),
    ("resources=VCPU:2,MEMORY_MB:128", "DISK_GB missing"),
])
def test_a_resize_beyond_the_limits_is_a_usage_error(query, fault):
    with pytest.raises(UsageError, match=fault):
        lifecycle.resize_request(query, ("VCPU", "MEMORY_MB", "DISK_GB"))


def test_the_new_size_keeps_the_first_querys_traits_and_aggregates():
    old = "resources=VCPU:1,MEMORY_MB:64&required=CUSTOM_FAST&member_of=" \
          "11111111-2222-4333-8444-555555555555"
    assert lifecycle.resized_query(old, NEW) == (
        "resources=DISK_GB:1,MEMORY_MB:128,VCPU:2&required=CUSTOM_FAST&member_of="
        "11111111-2222-4333-8444-555555555555")
    assert lifecycle.resized_query(None, NEW) == "resources=DISK_GB:1,MEMORY_MB:128,VCPU:2"


@pytest.mark.parametrize("url", ["ftp://x/y.img", "file:///etc/sh adow", "x" * 10, ""])
def test_a_rebuild_image_that_is_no_url_we_take_is_a_usage_error(url):
    with pytest.raises(UsageError, match="--image"):
        lifecycle.check_image(url)


def test_a_rebuild_with_an_image_writes_it_and_without_keeps_the_spec_image():
    store, placement, spec = instance()
    asked = request(store, placement, spec, "rebuild", image_url="https://i.example/new.img")
    assert asked.request["image"] == {"url": "https://i.example/new.img", "sha256": None}
    host_ends(store, asked)
    assert "image" not in request(store, placement, spec, "rebuild").request


# ------------------------------------------------------------------------ wait


def host_ends(store: FakeStore, asked: lifecycle.Requested, error: str | None = None) -> None:
    """What the host does with the request: take it up and end it."""
    spec = spec_now(store, {"uuid": asked.uuid})
    entry = store.get(store.keys.spec(RP, asked.uuid))
    read = records.read_record(store, RP, asked.uuid)
    assert action_txn.begin_action(store, spec, entry.mod_revision, read)
    assert action_txn.end_action(store, records.read_record(store, RP, asked.uuid),
                                store.get(entry.key), error)


def test_wait_ends_with_the_requests_event():
    store, placement, spec = instance()
    asked = request(store, placement, spec, "stop")
    host_ends(store, asked)
    seen = []
    outcome = lifecycle.wait(store, asked, 5, lambda _u, r: seen.append(r["state"]))
    assert outcome.ok and outcome.record["state"] == "SHUTOFF" and seen == ["SHUTOFF"]
    asked = request(store, placement, spec, "start")
    host_ends(store, asked, "no such domain")
    outcome = lifecycle.wait(store, asked, 5, lambda *_: None)
    assert not outcome.ok and outcome.error == "no such domain"


def test_wait_ends_when_a_destroy_took_over_first():
    store, placement, spec = instance()
    asked = request(store, placement, spec, "reboot")
    set_state(store, spec["uuid"], "DELETING")
    outcome = lifecycle.wait(store, asked, 5, lambda *_: None)
    assert not outcome.ok and outcome.error == "superseded: the instance is DELETING now"


def test_wait_runs_out_of_time_saying_so():
    store, placement, spec = instance()
    asked = request(store, placement, spec, "reboot")
    with pytest.raises(WaitTimeout, match="still ACTIVE after 0.05 s; the reboot goes on"):
        lifecycle.wait(store, asked, 0.05, lambda *_: None, interval=0.01)


def test_events_of_an_instance_and_of_none():
    store, placement, spec = instance()
    host_ends(store, request(store, placement, spec, "stop"))
    found = lifecycle.instance_events(store, spec["uuid"])
    assert [e["action"] for e in found] == ["stop"] and found == events.read(
        store, RP, spec["uuid"])
    with pytest.raises(NotFound):
        lifecycle.instance_events(store, UNKNOWN)
    alive(store, RP)


# --- a resize held until confirmed or reverted (the compute API's) ----------------------------

HOLD = "6f0e2b8e-6a55-4f0e-8a3b-2b7e1d9c4e61"


def host_does(store: FakeStore, spec: dict, error: str | None = None) -> dict:
    """What the host does with the request in the spec: take it up and end it."""
    written = spec_now(store, spec)
    entry = store.get(store.keys.spec(RP, spec["uuid"]))
    assert action_txn.begin_action(store, written, entry.mod_revision,
                                   records.read_record(store, RP, spec["uuid"]))
    assert action_txn.end_action(store, records.read_record(store, RP, spec["uuid"]),
                                 store.get(entry.key), error)
    return records.read_record(store, RP, spec["uuid"]).record


def held(store, placement, spec) -> dict:
    lifecycle.request(store, placement, spec["uuid"], "resize",
                      asked=lifecycle.Asked(resources=NEW, hold=HOLD))
    return host_does(store, spec)


def test_a_held_resize_keeps_the_old_size_claimed_until_it_is_confirmed():
    store, placement, spec = instance()
    record = held(store, placement, spec)
    assert record["resources"] == NEW and record["resize_hold"]["consumer"] == HOLD
    assert placement.get_allocations(spec["uuid"])["allocations"] == {RP: {"resources": NEW}}
    assert placement.get_allocations(HOLD)["allocations"] == spec["allocations"]
    assert lifecycle.confirm_resize(store, placement, spec["uuid"])["consumer"] == HOLD
    assert HOLD not in placement.consumers
    record = records.read_record(store, RP, spec["uuid"]).record
    assert record["resize_hold"] is None and record["state"] == "ACTIVE"
    resize, confirm = events.read(store, RP, spec["uuid"])[-2:]
    assert (resize["action"], confirm["action"]) == ("resize", "confirm-resize")
    assert confirm["request_id"] and confirm["request_id"] != resize["request_id"]
    with pytest.raises(states.ActionRefused, match="no resize to confirm"):
        lifecycle.confirm_resize(store, placement, spec["uuid"])


def test_a_revert_takes_the_held_size_back_and_resizes_the_guest_back():
    store, placement, spec = instance()
    held(store, placement, spec)
    asked = lifecycle.request(store, placement, spec["uuid"], "resize",
                              asked=lifecycle.Asked(revert=True))
    assert asked.request["reverts"] == HOLD and asked.request["resources"] == spec["resources"]
    # The claim is back before the host acts (it checks Placement holds the size asked).
    assert placement.get_allocations(spec["uuid"])["allocations"] == spec["allocations"]
    assert HOLD not in placement.consumers
    record = host_does(store, spec)
    assert record["resize_hold"] is None and record["resources"] == spec["resources"]
    assert events.read(store, RP, spec["uuid"])[-1]["action"] == "revert-resize"


@pytest.mark.parametrize("action", ["stop", "reboot", "rebuild", "resize"])
def test_nothing_but_a_revert_or_confirm_is_asked_while_a_resize_is_held(action):
    store, placement, spec = instance()
    held(store, placement, spec)
    before = store.revision
    with pytest.raises(states.ActionRefused, match="awaits the confirm or revert"):
        request(store, placement, spec, action)
    assert store.revision == before


def test_a_revert_without_a_held_resize_is_refused():
    store, placement, spec = instance()
    with pytest.raises(states.ActionRefused, match="no resize to revert"):
        lifecycle.request(store, placement, spec["uuid"], "resize",
                          asked=lifecycle.Asked(revert=True))
    assert placement.calls == []


def test_a_held_resize_whose_write_loses_puts_both_claims_back():
    store, placement, spec = instance()

    def lose(_request):
        # The caller's compare fails: the request is not written.
        return [Compare(store.keys.server(spec["uuid"]), "version", "==", 7)], []

    with pytest.raises(UsageError, match="kept changing"):
        lifecycle.request(store, placement, spec["uuid"], "resize",
                          asked=lifecycle.Asked(resources=NEW, hold=HOLD), also=lose)
    assert placement.get_allocations(spec["uuid"])["allocations"] == spec["allocations"]
    assert HOLD not in placement.consumers


def test_the_callers_writes_go_in_the_requests_transaction():
    store, placement, spec = instance()
    key = store.keys.server(spec["uuid"])
    asked = lifecycle.request(store, placement, spec["uuid"], "stop", also=lambda r: (
        [], [Put(key, r["id"])]))
    assert store.get(key).value.decode() == asked.request["id"]
    assert store.get(key).mod_revision == store.get(store.keys.spec(RP, spec["uuid"])).mod_revision


def test_a_destroy_confirms_a_held_resize():
    from etcd_compute.ops import operations

    store, placement, spec = instance()
    held(store, placement, spec)
    assert operations.destroy(store, placement, spec["uuid"]) == "requested"
    assert HOLD not in placement.consumers


def test_a_failed_held_resize_leaves_nothing_to_confirm():
    store, placement, spec = instance()
    lifecycle.request(store, placement, spec["uuid"], "resize",
                      asked=lifecycle.Asked(resources=NEW, hold=HOLD))
    record = host_does(store, spec, error="cannot resize")
    assert "resize_hold" not in record


def test_a_rebuild_may_carry_new_user_data_and_key():
    store, placement, spec = instance()
    asked = lifecycle.request(store, placement, spec["uuid"], "rebuild", asked=lifecycle.Asked(
        rebuild={"user_data": "#cloud-config\n", "ssh_key": None}))
    assert (asked.request["user_data"], asked.request["ssh_key"]) == ("#cloud-config\n", None)


@pytest.mark.parametrize("hold", [None, HOLD])
def test_a_resize_whose_etcd_write_fails_puts_its_claims_back(monkeypatch, hold):
    """etcd unreachable (or any error) in the request's write, after the claim: the claim
    goes back as if the write had lost a race (no hold left, no new size claimed)."""
    store, placement, spec = instance()

    def unreachable(*_args, **_kwargs):
        raise EtcdUnavailable("etcd: unreachable")

    monkeypatch.setattr(action_txn, "request_action", unreachable)
    with pytest.raises(EtcdUnavailable):
        lifecycle.request(store, placement, spec["uuid"], "resize",
                          asked=lifecycle.Asked(resources=NEW, hold=hold))
    assert placement.get_allocations(spec["uuid"])["allocations"] == spec["allocations"]
    assert HOLD not in placement.consumers


def test_a_resize_whose_callers_writes_fail_puts_its_claim_back():
    store, placement, spec = instance()

    def broken(_request):
        raise UsageError("the caller's view could not be written")

    with pytest.raises(UsageError, match="caller's view"):
        lifecycle.request(store, placement, spec["uuid"], "resize",
                          asked=lifecycle.Asked(resources=NEW), also=broken)
    assert placement.get_allocations(spec["uuid"])["allocations"] == spec["allocations"]


def test_security_groups_without_the_new_groups_is_a_usage_error_writing_nothing():
    store, placement, spec = instance()
    before = store.revision
    with pytest.raises(UsageError, match="new security groups are needed"):
        lifecycle.request(store, placement, spec["uuid"], "security-groups")
    assert store.revision == before


def test_an_instance_without_a_network_joins_no_security_group_nothing_written():
    store, placement, spec = instance(network=False)
    before = store.revision
    with pytest.raises(states.ActionRefused, match="has no network interface"):
        request(store, placement, spec, "security-groups",
                asked=lifecycle.Asked(security_groups=["default"]))
    assert store.revision == before


def test_a_reverted_move_answers_with_the_start_to_follow_nothing_started_yet():
    from tests.unit.ops.test_migrations import RP, awaiting_confirm

    store, placement, uuid, _asked, _steps = awaiting_confirm()
    requested = lifecycle.revert_move(store, placement, uuid, by="api:root@admin")
    assert requested is not None
    assert (requested.host, requested.action, requested.request["by"]) == (
        RP, "start", "api:root@admin")
    spec = store.read(messages.INSTANCE_SPEC, store.keys.spec(RP, uuid))[0]
    assert spec["action"] == "migrate"  # the controller starts it, once discarded
    stopped = awaiting_confirm("SHUTOFF")
    assert lifecycle.revert_move(stopped[0], stopped[1], stopped[2]) is None


def test_a_reverted_move_whose_destination_never_discards_never_starts_the_source():
    """Two copies of one guest (one MAC, one port) must never run: however long the
    destination takes, the source's copy is not started while the destination holds its
    own, and the revert returns at once (the compute API's 202)."""
    import time

    from etcd_compute.controller.migrations import MoveSteps
    from tests.unit.ops.test_migrations import OTHER, RP, awaiting_confirm

    store, placement, uuid, _asked, _steps = awaiting_confirm()
    started = time.monotonic()
    lifecycle.revert_move(store, placement, uuid, by="api:root@admin")
    assert time.monotonic() - started < 0.05  # nothing awaited
    steps = MoveSteps(store, placement)
    for _ in range(3):
        steps.step(uuid)
        steps.sweep()
    spec = store.read(messages.INSTANCE_SPEC, store.keys.spec(RP, uuid))[0]
    assert spec["action"] != "start"
    assert records.read_record(store, RP, uuid).state == "SHUTOFF"
    assert records.read_record(store, OTHER, uuid).record is not None  # never discarded
    with pytest.raises(states.ActionRefused, match="revert"):
        lifecycle.request(store, placement, uuid, "start")

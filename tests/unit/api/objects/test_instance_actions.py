"""Our events as Nova's instance actions: names, results, who asked, request ids."""

from __future__ import annotations

from etcd_compute import events
from etcd_compute.api.objects import instance_actions

UUID = "8ad8abc4-28c1-4ab8-b74d-3ec051a1242d"
RP = "0b5d6c43-43f6-4c1e-9f8b-6c5a8a6f2a11"


def test_our_events_map_to_novas_actions_and_events():
    for ours, (nova, event) in instance_actions.NOVA.items():
        found = instance_actions.of_event(UUID, events.event(ours, RP, "hv1",
                                                             result=events.SUCCESS))
        assert (found.action, found.event, found.result) == (nova, event, "Success")
    unknown = instance_actions.of_event(UUID, events.event("reschedule", RP))
    assert (unknown.action, unknown.result, unknown.finish_time) == ("reschedule", "", None)


def test_who_asked_through_the_api_is_the_actions_user_and_project():
    found = instance_actions.of_event(UUID, events.event(
        "stop", RP, by="api:u1@p1", request_id="1b5d6c43-43f6-4c1e-9f8b-6c5a8a6f2a11"))
    assert (found.user_id, found.project_id) == ("u1", "p1")
    assert found.request_id == "req-1b5d6c43-43f6-4c1e-9f8b-6c5a8a6f2a11"
    operator = instance_actions.of_event(UUID, events.event("stop", RP, by="ann@desk"))
    assert (operator.user_id, operator.project_id) == (None, None)


def test_an_event_without_a_request_gets_a_stable_id_and_a_refusal_is_an_error():
    event = events.event("power-off", RP, by=events.HYPERVISOR, result=events.REFUSED,
                         error="busy")
    one, two = (instance_actions.of_event(UUID, event) for _ in range(2))
    assert one.request_id == two.request_id and one.request_id.startswith("req-")
    assert (one.result, one.message, one.traceback) == ("Error", "Error", "refused: busy")


def test_host_ids_are_novas():
    assert instance_actions.host_id("p1", None) == ""
    assert len(instance_actions.host_id("p1", RP)) == 56


def test_a_move_is_novas_live_migration_or_migrate():
    moved = events.event("migrate", RP, "hv1", result=events.SUCCESS)
    live = instance_actions.of_event(UUID, {**moved, "live": True})
    cold = instance_actions.of_event(UUID, {**moved, "live": False})
    assert (live.action, live.event) == ("live-migration", "compute_live_migration")
    assert (cold.action, cold.event) == ("migrate", "compute_prep_resize")

"""Migrations from an instance's events: types, statuses, source and destination."""

from __future__ import annotations

from etcd_compute import events
from etcd_compute.api.objects import migrations
from etcd_compute.api.objects.servers import Server

UUID = "0b5d6c43-43f6-4c1e-9f8b-6c5a8a6f2a11"


def _server(host_name: str) -> Server:
    return Server({"uuid": UUID, "project_id": "p1", "user_id": "u1"}, 1,
                  {"uuid": UUID, "state": "ACTIVE", "host_name": host_name}, "rp")


def _event(action: str, host_name: str, at: float, result: str = events.SUCCESS,
           **more: object) -> dict:
    return {"action": action, "host": "rp", "host_name": host_name, "started_at": at,
            "ended_at": at + 1, "result": result, **more}


def test_moves_resizes_and_evacuations():
    log = [_event("create", "hv1", 1.0),
           _event("migrate", "hv1", 2.0, detail="3.0 s, downtime 20 ms",
                  by="api:admin-user@admin"),
           _event("resize", "hv2", 3.0), _event("revert-resize", "hv2", 4.0),
           _event("evacuate", "hv2", 5.0, result=events.ERROR),
           _event("recover", "hv2", 6.0)]
    found = migrations.of_server(_server("hv3"), log)
    assert [(m.migration_type, m.status, m.source_compute, m.dest_compute)
            for m in found] == [("live-migration", "completed", "hv1", "hv2"),
                                ("resize", "reverted", "hv2", "hv2"),
                                ("migration", "error", "hv2", None),
                                ("evacuation", "done", "hv2", "hv3")]
    assert (found[0].user_id, found[0].project_id) == ("admin-user", "admin")
    assert (found[1].user_id, found[1].project_id) == ("u1", "p1")
    # Stable ids: the same event is the same migration on every read.
    again = migrations.of_server(_server("hv3"), log)
    assert [m.id for m in again] == [m.id for m in found]
    assert [m.uuid for m in again] == [m.uuid for m in found]


def test_a_cold_move_names_no_downtime():
    (found,) = migrations.of_server(_server("hv2"), [_event("migrate", "hv1", 2.0,
                                                            detail="3.0 s")])
    assert (found.migration_type, found.dest_compute) == ("migration", "hv2")


def test_a_cold_move_finished_then_confirmed_or_reverted():
    cold = _event("migrate", "hv1", 2.0, detail="3.0 s", live=False, request_id="r1")
    waiting = _server("hv1")
    waiting.record.update(state="MIGRATED", request_id="r1",
                          task={"id": "r1", "finished": True})
    assert migrations.of_server(waiting, [cold])[0].status == "finished"
    confirmed = [cold, _event("confirm-resize", "hv2", 3.0)]
    assert migrations.of_server(_server("hv2"), confirmed)[0].status == "confirmed"
    reverted = [cold, _event("revert-resize", "hv1", 3.0), _event("start", "hv1", 3.5)]
    assert migrations.of_server(_server("hv1"), reverted)[0].status == "reverted"
    running = _event("migrate", "hv1", 2.0, result=events.RUNNING, live=False)
    assert (migrations.of_server(_server("hv1"), [running])[0].migration_type,
            migrations.of_server(_server("hv1"), [running])[0].status) == (
        "migration", "migrating")
    # One that did not wait (a drain's, the operator's): confirmed at once, as Nova's
    # resize_confirm_window of 1 s would.
    assert migrations.of_server(_server("hv2"), [cold])[0].status == "confirmed"
